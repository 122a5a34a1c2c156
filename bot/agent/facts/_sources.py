"""Pure readers of the figures the facts service needs, from ``/server_info`` and the log.

``/server_info`` gives ``{"max_total_num_tokens": 159274, "internal_states": [{"memory_usage":
{"kvcache": 10.42}}], "page_size": 1, "version": "0.5.9", ...}``; the startup log gives the same
device pool (``KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB``) plus the host pool
(``Allocating 44.77 GB host memory for hierarchical KV cache.``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.agent.cmdline import Topology
from bot.errors import PlanInputError
from bot.planner import DEFAULT_SGLANG_VERSION, GiB, HostExtra, SGLangVersion
from bot.startup import ReportBuilder, SlidingWindowFigures, StartupParser, StartupReport

__all__ = [
    "LOG_RUN_BYTES",
    "LogPools",
    "ModelHints",
    "device_from_info",
    "kv_gib_from_info",
    "model_hints",
    "page_size",
    "pools_of",
    "report_of_text",
    "version_of",
]


@dataclass(frozen=True)
class LogPools:
    """What the last start's log says of the pools, per rank: the target model's device pool
    (tokens, GiB as logged), the KV host pool, the other host pools beside it, a draft pool."""

    tokens: int | None = None
    kv_gib: float | None = None
    host_tokens: int | None = None
    host_gb: float | None = None
    host_extras: tuple[HostExtra, ...] = ()
    draft_kv_gib: float | None = None
    undecided: str | None = None
    sliding_window: SlidingWindowFigures | None = None

    @property
    def per_token(self) -> float | None:
        """KV bytes per token as the logged figures divide (for status; plans resolve it)."""
        return self.kv_gib * GiB / self.tokens if self.tokens and self.kv_gib else None


@dataclass(frozen=True)
class ModelHints:
    """What the command line says of the model: where its files are, the KV cache dtype, and
    whether speculative decoding runs."""

    model_path: str | None = None
    kv_cache_dtype: str = "auto"
    speculative: bool = False
    max_total_tokens: int | None = None


_HINT_FLAGS = (
    "--model-path",
    "--model",
    "--kv-cache-dtype",
    "--speculative-algorithm",
    "--max-total-tokens",
)

# Only the beginning of the last run is read: its pool lines come within the first minutes of
# output, and a run of weeks of request lines is not re-parsed on every status call.
LOG_RUN_BYTES = 8 * 1024 * 1024


def report_of_text(text: str) -> StartupReport:
    """The startup report of one run's output."""
    parser = StartupParser()
    builder = ReportBuilder()
    for event in [*parser.feed(text), *parser.close()]:
        builder.add(event)
    return builder.build()


def pools_of(report: StartupReport) -> LogPools:
    """The pools of a start's log, first rank's figures.

    ``KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB`` (GiB) gives 159274 tokens and
    10.42 GiB: the target model's pool, whatever draft pool is logged after it;
    ``Allocating 44.77 GB host memory`` gives 44.77 GB; a DSA indexer's host pool beside the KV
    host pool is kept with both logged sizes, so a new size can scale it.
    """
    tokens = report.device_tokens
    if tokens is None and report.device_tokens_per_rank:
        tokens = next(iter(report.device_tokens_per_rank.values()))
    kv_gib = next(iter(report.kv_gib_per_rank.values()), None)
    host_gb = next(iter(report.host_gb_per_rank.values()), None)
    host_tokens = next(iter(report.host_tokens_per_rank.values()), None)
    extras = next(iter(report.host_extra_gb_per_rank.values()), {})
    return LogPools(
        tokens=tokens,
        kv_gib=kv_gib,
        host_tokens=host_tokens,
        host_gb=host_gb,
        host_extras=tuple(HostExtra(name, gb, host_gb) for name, gb in extras.items() if host_gb),
        draft_kv_gib=None if report.draft_pool is None else report.draft_pool.kv_gib,
        undecided=report.device_pool_undecided,
        sliding_window=report.sliding_window,
    )


def model_hints(argv: Sequence[str]) -> ModelHints:
    """``--model-path``, ``--kv-cache-dtype``, ``--speculative-algorithm`` and
    ``--max-total-tokens`` of a command line (``--flag value`` or ``--flag=value``; the last one
    wins, as in argparse; a cap that is not a whole number is left to SGLang's parser)."""
    values: dict[str, str] = {}
    for index, arg in enumerate(argv):
        name, sep, inline = arg.partition("=")
        if name in _HINT_FLAGS:
            value = inline if sep else (argv[index + 1] if index + 1 < len(argv) else "")
            values["--model-path" if name == "--model" else name] = value
    return ModelHints(
        model_path=values.get("--model-path") or None,
        kv_cache_dtype=values.get("--kv-cache-dtype") or "auto",
        speculative=bool(values.get("--speculative-algorithm")),
        max_total_tokens=_whole(values.get("--max-total-tokens")),
    )


def _whole(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and int(text) > 0 else None


def version_of(text: str | None) -> SGLangVersion:
    if text is None:
        return DEFAULT_SGLANG_VERSION
    try:
        return SGLangVersion.parse(text)
    except PlanInputError:
        # A dev build's version string ("0.5.9+cu128.dirty") is still that era's SGLang.
        return DEFAULT_SGLANG_VERSION


def page_size(info: dict[str, Any] | None, topology: Topology | None) -> int:
    value = None if info is None else info.get("page_size")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if topology is not None and topology.page_size is not None and topology.page_size >= 1:
        return topology.page_size
    return 1


def kv_gib_from_info(info: dict[str, Any] | None) -> float | None:
    """The device pool's GiB from ``/server_info``'s ``memory_usage.kvcache`` (two decimals,
    the target model's pool), or None."""
    states = None if info is None else info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        usage = states[0].get("memory_usage")
        kv = usage.get("kvcache") if isinstance(usage, dict) else None
        if isinstance(kv, int | float) and not isinstance(kv, bool) and kv > 0:
            return float(kv)
    return None


def device_from_info(info: dict[str, Any] | None) -> tuple[int | None, float | None]:
    """(device tokens, KV bytes per token) from ``/server_info``.

    ``{"max_total_num_tokens": 159274, "internal_states": [{"memory_usage": {"kvcache": 10.42}}]}``
    gives (159274, 10.42 GiB / 159274 = 70247.4 B): the GiB are rounded to two decimals, so the
    figure is within 0.05% of the model's 70,272 B.
    """
    if info is None:
        return None, None
    tokens = info.get("max_total_num_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
        return None, None
    kv = kv_gib_from_info(info)
    return tokens, None if kv is None else kv * GiB / tokens
