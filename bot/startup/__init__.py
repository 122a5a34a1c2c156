"""SGLang's startup log as typed events, and the report of one start built from them.

``StartupParser`` is pure (text in, events out) and incremental: the agent feeds it the log as
it grows. ``build_report`` folds events into a ``StartupReport``; ``read_startup_report`` does
both for a file on disk. ``FailureKind`` is ``bot.vocab``'s: the parser tells the kinds in
``bot.vocab.LOG_FAILURE_KINDS``.
"""

from __future__ import annotations

from bot.startup._file import read_startup_report
from bot.startup.events import (
    HYBRID_SWA_HOST_POOL,
    KV_HOST_POOL,
    DevicePool,
    Dialect,
    DialectDetected,
    Event,
    FailureKind,
    FailureSeen,
    GraphProgress,
    HostPool,
    MaxTotalTokens,
    MemoryHeadroom,
    Phase,
    PhaseStarted,
    PoolKind,
    RankSeen,
    ShardProgress,
    SlidingWindowPool,
    SlidingWindowSplit,
)
from bot.startup.parser import StartupParser
from bot.startup.report import (
    Failure,
    PhaseSpan,
    PoolFigures,
    ReportBuilder,
    SlidingWindowFigures,
    StartupReport,
    build_report,
    classify_pools,
)

__all__ = [
    "HYBRID_SWA_HOST_POOL",
    "KV_HOST_POOL",
    "DevicePool",
    "Dialect",
    "DialectDetected",
    "Event",
    "Failure",
    "FailureKind",
    "FailureSeen",
    "GraphProgress",
    "HostPool",
    "MaxTotalTokens",
    "MemoryHeadroom",
    "Phase",
    "PhaseSpan",
    "PhaseStarted",
    "PoolFigures",
    "PoolKind",
    "RankSeen",
    "ReportBuilder",
    "ShardProgress",
    "SlidingWindowFigures",
    "SlidingWindowPool",
    "SlidingWindowSplit",
    "StartupParser",
    "StartupReport",
    "build_report",
    "classify_pools",
    "read_startup_report",
]
