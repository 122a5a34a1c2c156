"""Capacity reports: the report model, the trend chart, recommendations and the ``[reports]``
settings. Pure: no agent, store or scheduler is touched here.

:mod:`bot.reports.runtime` does the I/O: it asks the agents in parallel, stores samples, puts
recommendations to the planner and runs the scheduler::

    report = HostReport(host="kimi-01", at=now, ...)     # built by runtime.collect
    png = render_chart("kimi-01", samples, changes, start, now)
    need = assess(samples, now, settings.rules)           # then candidates(setting, need.need)
"""

from __future__ import annotations

from bot.reports.cadence import Cadence
from bot.reports.chart import CHART_PX, alt_text, chart_window, render_chart
from bot.reports.model import (
    MEMORY_NOTICE_WINDOW,
    ConfigChange,
    GpuMemory,
    HostReport,
    LastOperation,
    ServerMetrics,
    sample_of,
)
from bot.reports.recommend import Assessment, Candidate, Need, assess, candidates
from bot.reports.settings import RecommendRules, ReportSettings, load_report_settings

__all__ = [
    "CHART_PX",
    "MEMORY_NOTICE_WINDOW",
    "Assessment",
    "Cadence",
    "Candidate",
    "ConfigChange",
    "GpuMemory",
    "HostReport",
    "LastOperation",
    "Need",
    "RecommendRules",
    "ReportSettings",
    "ServerMetrics",
    "alt_text",
    "assess",
    "candidates",
    "chart_window",
    "load_report_settings",
    "render_chart",
    "sample_of",
]
