"""A host's capacity report: plain figures, built from what its agent said and the stored samples.

Nothing here does I/O: :mod:`bot.reports.runtime` asks the agents (in parallel) and the store,
and hands the answers to :func:`sample_of` and the front ends lay out :class:`HostReport`.
GB are 1e9 bytes, as the agent and the planner count them; fractions are 0..1.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bot._agent_memory import AgentMemoryNotice
from bot.hicache import HiCacheSetting
from bot.prometheus import ServerMetrics
from bot.store.records import CapacitySample

__all__ = [
    "MEMORY_NOTICE_WINDOW",
    "ConfigChange",
    "GpuMemory",
    "HostReport",
    "LastOperation",
    "ServerMetrics",
    "sample_of",
]

GB = 1e9
#: How far back a report lists the memory notices the agent kept.
MEMORY_NOTICE_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class GpuMemory:
    index: int
    used_gb: float | None
    total_gb: float | None


@dataclass(frozen=True)
class LastOperation:
    """The newest operation the host's agent ran."""

    id: int
    kind: str
    state: str
    actor: str
    at: datetime


@dataclass(frozen=True)
class ConfigChange:
    """A configuration that became ready on the host, for the chart's markers."""

    at: datetime
    label: str  # "ratio 4", "size 48 GB"


@dataclass(frozen=True)
class HostReport:
    """One host's capacity now. ``problem`` set means the agent did not answer: every figure is
    then None and the host is listed as unreachable, never dropped."""

    host: str
    at: datetime
    problem: str | None = None
    server_state: str | None = None
    version: str | None = None
    uptime_s: float | None = None
    setting: str | None = None  # the effective HiCache setting, as a person reads it
    hicache: HiCacheSetting | None = None  # the flags as the agent reads them
    revision: int | None = None  # the audit's revision of the config running now
    ram_total_gb: float | None = None
    ram_available_gb: float | None = None
    hicache_gb: float | None = None  # host RAM held by HiCache's pools, all ranks
    ranks: int | None = None
    gpus: tuple[GpuMemory, ...] = ()
    device_tokens: int | None = None
    host_tokens_per_rank: int | None = None
    metrics: ServerMetrics | None = None
    last_operation: LastOperation | None = None
    changes: tuple[ConfigChange, ...] = ()  # configs that became ready, oldest first
    # The post-ready memory watch's notices of the last MEMORY_NOTICE_WINDOW, oldest first, and
    # whether the server's headroom is under the guard's floor now.
    memory_notices: tuple[AgentMemoryNotice, ...] = ()
    memory_below_floor: bool = False

    @property
    def answered(self) -> bool:
        return self.problem is None


def _bytes(gb: float | None) -> int | None:
    return None if gb is None else round(gb * GB)


def sample_of(report: HostReport) -> CapacitySample | None:
    """The point the sampling job stores for ``report``; None for a host that did not answer
    (a gap in the series, not zeros)."""
    if not report.answered:
        return None
    metrics = report.metrics or ServerMetrics()
    gpus = tuple(
        {"index": g.index, "used_bytes": _bytes(g.used_gb), "total_bytes": _bytes(g.total_gb)}
        for g in report.gpus
    )
    return CapacitySample(
        host=report.host,
        at=report.at,
        ram_total_bytes=_bytes(report.ram_total_gb),
        ram_available_bytes=_bytes(report.ram_available_gb),
        hicache_host_bytes=_bytes(report.hicache_gb),
        device_tokens=report.device_tokens,
        host_tokens=report.host_tokens_per_rank,
        token_usage=metrics.token_usage,
        queued_requests=metrics.queued_requests,
        running_requests=metrics.running_requests,
        cache_hit_rate=metrics.cache_hit_rate,
        gpus=gpus,
    )
