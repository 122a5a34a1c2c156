"""Capacity reports' I/O: agents asked in parallel, samples stored, charts drawn from them,
advice put to the planner, and the APScheduler scheduler in the bot process::

    desk = ReportDesk(core.context.clients, store, settings, ServerMetricsSource(urls), clock)
    core.context.reporter = desk                  # `report`, `report every 6h`, ... now work
    scheduler = ReportScheduler(core.context, desk, poster, store, settings)
    scheduler.start()                             # unless --no-scheduler; SchedulerLocked if
    ...                                           # another bot runs one on this database
    scheduler.stop()
"""

from __future__ import annotations

from bot.reports.runtime.advice import advise
from bot.reports.runtime.collect import (
    MetricsSource,
    ServerMetricsSource,
    collect_reports,
    report_from,
)
from bot.reports.runtime.desk import ReportDesk
from bot.reports.runtime.scheduler import JOB_TABLE, ReportScheduler, report_job_id
from bot.reports.runtime.wiring import (
    NO_SCHEDULER_HELP,
    add_scheduler_flag,
    attach_reports,
    start_scheduler,
)

__all__ = [
    "JOB_TABLE",
    "NO_SCHEDULER_HELP",
    "MetricsSource",
    "ReportDesk",
    "ReportScheduler",
    "ServerMetricsSource",
    "add_scheduler_flag",
    "advise",
    "attach_reports",
    "collect_reports",
    "report_from",
    "report_job_id",
    "start_scheduler",
]
