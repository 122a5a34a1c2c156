"""``kimi-ops plan``: size a HiCache change and check it fits, from figures an operator has.

    kimi-ops plan --ratio 4 --ranks 8 --available-gb 396 --held-gb 200 \\
        --device-tokens 159274 --kv-gib 10.42 [--model-config /models/kimi/config.json]

Bytes per token come from ``--bytes-per-token``, else the model's ``config.json``, else the logged
pool (``--kv-gib``, the top of its two-decimal rounding unless ``--layer-bytes`` pins it).

Exit 0 when it fits, 3 when refused, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from bot.cli_args import positive_int
from bot.errors import PlanInputError
from bot.planner._eta import StartSample
from bot.planner._kv_shape import KvShape, kv_shape_from_config
from bot.planner._plan import (
    DEFAULT_HEADROOM_GB,
    ChangeRequest,
    HostMemory,
    Plan,
    ServerFacts,
    make_plan,
)
from bot.planner._sizing import DevicePool, HostExtra
from bot.planner._units import GB
from bot.planner._version import SGLangVersion

EXIT_FITS = 0
EXIT_REFUSED = 3


def configure(parser: argparse.ArgumentParser) -> None:
    change = parser.add_mutually_exclusive_group(required=True)
    change.add_argument("--ratio", type=_number, metavar="R", help="host pool = R x device pool")
    change.add_argument(
        "--size", type=_number, metavar="GB", help="host pool GB (1e9 bytes) per rank, whole"
    )
    change.add_argument(
        "--auto",
        action="store_true",
        help="neither flag: SGLang >= 0.5.23 picks the ratio that fits the host at start",
    )
    parser.add_argument(
        "--ranks", type=positive_int, required=True, help="local ranks (TP x PP x DP on the host)"
    )
    parser.add_argument(
        "--available-gb", type=_non_negative, required=True, help="host RAM available now (GB)"
    )
    parser.add_argument(
        "--held-gb",
        type=_non_negative,
        default=0.0,
        help="RAM held by the running server's process tree, released by the restart (GB)",
    )
    parser.add_argument(
        "--headroom-gb",
        type=_non_negative,
        default=DEFAULT_HEADROOM_GB,
        help=f"RAM kept for the server's other needs and the OS (default {DEFAULT_HEADROOM_GB:g})",
    )
    parser.add_argument(
        "--device-tokens", type=positive_int, help="device KV pool tokens per rank (#tokens)"
    )
    per_token = parser.add_mutually_exclusive_group()
    per_token.add_argument(
        "--kv-gib", type=_positive, help="device KV pool size per rank as logged (GiB)"
    )
    per_token.add_argument("--bytes-per-token", type=_positive, help="KV bytes per token per rank")
    parser.add_argument(
        "--model-config", metavar="CONFIG_JSON", help="the model's config.json (exact bytes/token)"
    )
    parser.add_argument(
        "--tp-size", type=positive_int, help="TP size, splitting MHA KV heads (default: --ranks)"
    )
    parser.add_argument(
        "--kv-cache-dtype", default="auto", help="SGLang's --kv-cache-dtype (default auto)"
    )
    parser.add_argument(
        "--layer-bytes", type=positive_int, help="one layer's KV bytes per token, if known"
    )
    parser.add_argument(
        "--speculative",
        action="store_true",
        help="speculative decoding runs: count draft layers SGLang may pack into the pool",
    )
    parser.add_argument(
        "--host-extra",
        action="append",
        default=[],
        type=_host_extra,
        metavar="NAME=GB@KV_GB",
        help="another host pool the last start logged beside the KV host pool, e.g. "
        "'DSA indexer=29.02@126.61' (repeatable)",
    )
    parser.add_argument("--page-size", type=positive_int, default=1, help="tokens per page")
    parser.add_argument("--sglang-version", type=_version, default="0.5.9", help="default 0.5.9")
    parser.add_argument("--cgroup-limit-gb", type=_non_negative, help="memory limit of the cgroup")
    parser.add_argument(
        "--startup",
        action="append",
        default=[],
        type=_start_sample,
        metavar="SECONDS@GB",
        help="an earlier start: its seconds and host GB per rank, e.g. 640@48 (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    pool = DevicePool.from_log(args.device_tokens, args.kv_gib)
    if args.bytes_per_token is not None:
        pool = DevicePool(tokens=args.device_tokens, bytes_per_token=args.bytes_per_token)
    version: SGLangVersion = args.sglang_version
    shape = None
    if args.model_config is not None:
        shape = _shape(args.model_config, args.tp_size or args.ranks, args.kv_cache_dtype)
    server = ServerFacts(
        ranks=args.ranks,
        device_pool=pool,
        page_size=args.page_size,
        version=version,
        kv_shape=shape,
        layer_bytes=args.layer_bytes,
        speculative=args.speculative,
        host_extras=tuple(args.host_extra),
    )
    plan = make_plan(
        ChangeRequest(ratio=args.ratio, size_gb=args.size, auto=args.auto),
        server,
        HostMemory(
            available_bytes=args.available_gb * GB,
            server_held_bytes=args.held_gb * GB,
            cgroup_limit_bytes=None if args.cgroup_limit_gb is None else args.cgroup_limit_gb * GB,
        ),
        headroom_gb=args.headroom_gb,
        history=args.startup,
    )
    print(json.dumps(plan.to_dict(), sort_keys=True) if args.json else render_plan(plan))
    return EXIT_FITS if plan.fits else EXIT_REFUSED


def _shape(path: str, tp_size: int, kv_cache_dtype: str) -> KvShape:
    try:
        config: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanInputError(f"model config '{path}' is not readable JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise PlanInputError(f"model config '{path}' must hold a JSON object")
    return kv_shape_from_config(config, tp_size=tp_size, kv_cache_dtype=kv_cache_dtype)


def render_plan(plan: Plan) -> str:
    """The plan as an operator reads it in a terminal."""
    lines = [f"HiCache {plan.setting} on {plan.ranks} ranks (SGLang {plan.sglang_version})"]
    if plan.per_rank_bytes is not None and plan.total_bytes is not None:
        tokens = "" if plan.per_rank_tokens is None else f"{plan.per_rank_tokens:>12,} tokens  "
        all_tokens = (
            ""
            if plan.per_rank_tokens is None
            else f"{plan.per_rank_tokens * plan.ranks:>12,} tokens  "
        )
        lines.append(f"  per rank    {tokens}{plan.per_rank_bytes / GB:9.2f} GB")
        for name, extra in plan.host_extra_bytes_per_rank.items():
            lines.append(f"  + {name:<22}{extra / GB:9.2f} GB per rank")
        lines.append(f"  all ranks   {all_tokens}{plan.total_bytes / GB:9.1f} GB")
    lines.append(
        f"  host RAM    {plan.available_bytes / GB:.1f} GB available"
        f" + {plan.server_held_bytes / GB:.1f} GB held by the server"
        f" -> {plan.free_after_stop_bytes / GB:.1f} GB free after stop"
    )
    lines.append(
        f"  budget      - {plan.reserve_bytes / GB:.1f} GB SGLang reserve"
        f" - {plan.headroom_bytes / GB:.1f} GB headroom = {plan.budget_bytes / GB:.1f} GB"
    )
    if plan.headroom_left_bytes is not None:
        lines.append(f"  left        {plan.headroom_left_bytes / GB:.1f} GB")
    if plan.device_tokens is not None:
        host = "?" if plan.per_rank_tokens is None else f"{plan.per_rank_tokens:,}"
        before = "" if plan.host_tokens_before is None else f" (now {plan.host_tokens_before:,})"
        lines.append(f"  tokens/rank device {plan.device_tokens:,}; host {host}{before}")
    if plan.expected_startup_s is not None:
        lines.append(f"  startup     ~{_minutes(plan.expected_startup_s)}")
    if plan.bytes_per_token is not None and plan.bytes_per_token_source is not None:
        spread = plan.bytes_per_token_uncertainty or 0.0
        exact = "exact" if not spread else f"true figure up to {spread:.3%} lower"
        lines.append(
            f"  KV/token    {plan.bytes_per_token:,.0f} B from {plan.bytes_per_token_source.value}"
            f" ({exact})"
        )
    lines.extend(f"  note        {note}" for note in plan.notes)
    lines.extend(f"  warning     {warning}" for warning in plan.warnings)
    by = "" if plan.refused_by is None else f" by {plan.refused_by.value}"
    lines.append(f"{plan.verdict.value.upper()}{by}: {plan.reason}")
    return "\n".join(lines)


def _minutes(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s"


def _number(text: str) -> float:
    """A number as typed; 'abc' is a bad argument, while nan, 44.5 or -1 reach the planner,
    which says why SGLang would refuse them."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _positive(text: str) -> float:
    value = _number(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number greater than 0")
    return value


def _non_negative(text: str) -> float:
    value = _number(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of GB, 0 or more")
    return value


def _version(text: str) -> SGLangVersion:
    try:
        return SGLangVersion.parse(text)
    except PlanInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _host_extra(text: str) -> HostExtra:
    name, sep, sizes = text.rpartition("=")
    gb, at, kv_gb = sizes.partition("@")
    try:
        extra = HostExtra(name=name.strip(), logged_gb=float(gb), kv_logged_gb=float(kv_gb))
    except ValueError:
        extra = None
    if not sep or not at or extra is None or not extra.name:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME=GB@KV_GB, e.g. 'DSA indexer=29.02@126.61'"
        )
    if not (math.isfinite(extra.logged_gb) and extra.logged_gb >= 0 and extra.kv_logged_gb > 0):
        raise argparse.ArgumentTypeError(f"{text!r} needs GB >= 0 and KV_GB > 0")
    return extra


def _start_sample(text: str) -> StartSample:
    seconds, sep, gb = text.partition("@")
    try:
        sample = StartSample(seconds=float(seconds), host_gb_per_rank=float(gb) if sep else 0.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not SECONDS@GB, e.g. 640@48") from None
    if sample.seconds <= 0 or sample.host_gb_per_rank < 0:
        raise argparse.ArgumentTypeError(f"{text!r} needs seconds > 0 and GB >= 0")
    return sample
