"""Capacity reports: the report model and the ``[reports]`` settings. Pure: no agent, store or
scheduler is touched here; :mod:`bot.reports.runtime` asks the agents in parallel."""

from __future__ import annotations

from bot.reports._prometheus import metrics_from_mapping, parse_prometheus
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
    "ConfigChange",
    "GpuMemory",
    "HostReport",
    "LastOperation",
    "RecommendRules",
    "ReportSettings",
    "ServerMetrics",
    "load_report_settings",
    "metrics_from_mapping",
    "parse_prometheus",
    "sample_of",
]
