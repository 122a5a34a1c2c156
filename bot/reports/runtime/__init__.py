"""Capacity reports' I/O: every host's agent asked at once."""

from __future__ import annotations

from bot.reports.runtime.collect import (
    MetricsSource,
    ServerMetricsSource,
    collect_reports,
    report_from,
)

__all__ = ["MetricsSource", "ServerMetricsSource", "collect_reports", "report_from"]
