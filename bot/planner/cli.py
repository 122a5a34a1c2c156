"""``kimi-ops plan``: size a HiCache change and check it fits, from figures an operator has.

    kimi-ops plan --ratio 4 --ranks 8 --available-gb 396 --held-gb 200 \\
        --device-tokens 159274 --kv-gib 10.42

Exit 0 when it fits, 3 when refused, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math

from bot.errors import PlanInputError
from bot.planner._eta import StartSample
from bot.planner._plan import (
    DEFAULT_HEADROOM_GB,
    ChangeRequest,
    HostMemory,
    Plan,
    ServerFacts,
    make_plan,
)
from bot.planner._sizing import DevicePool
from bot.planner._units import GB, GiB
from bot.planner._version import SGLangVersion

EXIT_FITS = 0
EXIT_REFUSED = 3


def configure(parser: argparse.ArgumentParser) -> None:
    change = parser.add_mutually_exclusive_group(required=True)
    change.add_argument("--ratio", type=_number, metavar="R", help="host pool = R x device pool")
    change.add_argument(
        "--size", type=_number, metavar="GB", help="host pool GB (1e9 bytes) per rank, whole"
    )
    parser.add_argument(
        "--ranks", type=_positive_int, required=True, help="local ranks (TP x PP x DP on the host)"
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
        "--device-tokens", type=_positive_int, help="device KV pool tokens per rank (#tokens)"
    )
    per_token = parser.add_mutually_exclusive_group()
    per_token.add_argument(
        "--kv-gib", type=_positive, help="device KV pool size per rank as logged (GiB)"
    )
    per_token.add_argument("--bytes-per-token", type=_positive, help="KV bytes per token per rank")
    parser.add_argument("--page-size", type=_positive_int, default=1, help="tokens per page")
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
    pool = DevicePool(
        tokens=args.device_tokens,
        kv_bytes=None if args.kv_gib is None else args.kv_gib * GiB,
        bytes_per_token=args.bytes_per_token,
    )
    version: SGLangVersion = args.sglang_version
    plan = make_plan(
        ChangeRequest(ratio=args.ratio, size_gb=args.size),
        ServerFacts(ranks=args.ranks, device_pool=pool, page_size=args.page_size, version=version),
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


def render_plan(plan: Plan) -> str:
    """The plan as an operator reads it in a terminal."""
    lines = [
        f"HiCache {plan.request.phrase()} on {plan.ranks} ranks (SGLang {plan.sglang_version})"
    ]
    if plan.per_rank_bytes is not None and plan.total_bytes is not None:
        tokens = "" if plan.per_rank_tokens is None else f"{plan.per_rank_tokens:>12,} tokens  "
        all_tokens = (
            ""
            if plan.per_rank_tokens is None
            else f"{plan.per_rank_tokens * plan.ranks:>12,} tokens  "
        )
        lines.append(f"  per rank    {tokens}{plan.per_rank_bytes / GB:9.2f} GB")
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
    lines.extend(f"  warning     {warning}" for warning in plan.warnings)
    lines.append(f"{plan.verdict.value.upper()}: {plan.reason}")
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _version(text: str) -> SGLangVersion:
    try:
        return SGLangVersion.parse(text)
    except PlanInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _start_sample(text: str) -> StartSample:
    seconds, sep, gb = text.partition("@")
    try:
        sample = StartSample(seconds=float(seconds), host_gb_per_rank=float(gb) if sep else 0.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not SECONDS@GB, e.g. 640@48") from None
    if sample.seconds <= 0 or sample.host_gb_per_rank < 0:
        raise argparse.ArgumentTypeError(f"{text!r} needs seconds > 0 and GB >= 0")
    return sample
