"""SGLang's startup log as typed events, and the report of one start built from them.

``StartupParser`` is pure (text in, events out) and incremental: the agent feeds it the log as
it grows. ``build_report`` folds events into a ``StartupReport``; ``read_startup_report`` does
both for a file on disk.
"""

from __future__ import annotations

from bot.startup._file import read_startup_report
from bot.startup.events import (
    DevicePool,
    Dialect,
    DialectDetected,
    Event,
    FailureKind,
    FailureSeen,
    GraphProgress,
    HostPool,
    MaxTotalTokens,
    Phase,
    PhaseStarted,
    RankSeen,
    ShardProgress,
)
from bot.startup.parser import StartupParser
from bot.startup.report import Failure, PhaseSpan, ReportBuilder, StartupReport, build_report

__all__ = [
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
    "Phase",
    "PhaseSpan",
    "PhaseStarted",
    "RankSeen",
    "ReportBuilder",
    "ShardProgress",
    "StartupParser",
    "StartupReport",
    "build_report",
    "read_startup_report",
]
