"""Capacity reports: the report model, the trend chart and the ``[reports]`` settings. Pure: no
agent, store or scheduler is touched here; :mod:`bot.reports.runtime` asks the agents in
parallel::

    png = render_chart("kimi-01", samples, changes, chart_window(samples, now, 24), now)
"""

from __future__ import annotations

from bot.reports._prometheus import metrics_from_mapping, parse_prometheus
from bot.reports.chart import CHART_PX, alt_text, chart_window, render_chart
from bot.reports.model import (
    ConfigChange,
    GpuMemory,
    HostReport,
    LastOperation,
    ServerMetrics,
    sample_of,
)
from bot.reports.settings import RecommendRules, ReportSettings, load_report_settings

__all__ = [
    "CHART_PX",
    "ConfigChange",
    "GpuMemory",
    "HostReport",
    "LastOperation",
    "RecommendRules",
    "ReportSettings",
    "ServerMetrics",
    "alt_text",
    "chart_window",
    "load_report_settings",
    "metrics_from_mapping",
    "parse_prometheus",
    "render_chart",
    "sample_of",
]
