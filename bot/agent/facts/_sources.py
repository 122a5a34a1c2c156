"""Pure readers of the figures the facts service needs, from ``/server_info`` and the log.

``/server_info`` gives ``{"max_total_num_tokens": 159274, "internal_states": [{"memory_usage":
{"kvcache": 10.42}}], "page_size": 1, "version": "0.5.9", ...}``; the startup log gives the same
device pool (``KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB``) plus the host pool
(``Allocating 44.77 GB host memory for hierarchical KV cache.``).
"""

from __future__ import annotations

from typing import Any

from bot.agent.cmdline import Topology
from bot.errors import PlanInputError
from bot.planner import DEFAULT_SGLANG_VERSION, GiB, SGLangVersion
from bot.startup import ReportBuilder, StartupParser, StartupReport

__all__ = [
    "LOG_RUN_BYTES",
    "LogPools",
    "device_from_info",
    "page_size",
    "pools_of",
    "report_of_text",
    "version_of",
]

LogPools = tuple[int | None, float | None, tuple[int | None, float | None]]
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
    """(device tokens, KV bytes per token, (host tokens, host GB) per rank) of a start's log.

    ``KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB`` (GiB) gives 159274 tokens and
    10.42 GiB / 159274 = 70,247 B/token; ``Allocating 44.77 GB host memory`` gives 44.77 GB.
    """
    tokens = report.device_tokens
    if tokens is None and report.device_tokens_per_rank:
        tokens = next(iter(report.device_tokens_per_rank.values()))
    kv_gib = next(iter(report.kv_gib_per_rank.values()), None)
    per_token = kv_gib * GiB / tokens if tokens and kv_gib else None
    host_gb = next(iter(report.host_gb_per_rank.values()), None)
    host_tokens = next(iter(report.host_tokens_per_rank.values()), None)
    return tokens, per_token, (host_tokens, host_gb)


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
    per_token: float | None = None
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        usage = states[0].get("memory_usage")
        kv = usage.get("kvcache") if isinstance(usage, dict) else None
        if isinstance(kv, int | float) and not isinstance(kv, bool) and kv > 0:
            per_token = kv * GiB / tokens
    return tokens, per_token
