"""How a bot process takes capacity reports on: attach a :class:`ReportDesk` to the core, then
(unless ``--no-scheduler``) start the one :class:`ReportScheduler` of the database::

    core = build_core(settings, audit, front, os.environ)
    desk = attach_reports(core, store, load_report_settings(config))
    scheduler = None if args.no_scheduler else start_scheduler(core, desk, front, store)
"""

from __future__ import annotations

import argparse

import httpx

from bot.chat.core import ChatCore
from bot.chat.replies import ReportPoster
from bot.clock import Clock
from bot.reports import ReportSettings
from bot.reports.runtime.collect import ServerMetricsSource
from bot.reports.runtime.desk import ReportDesk
from bot.reports.runtime.scheduler import ReportScheduler
from bot.store import Store

__all__ = ["NO_SCHEDULER_HELP", "add_scheduler_flag", "attach_reports", "start_scheduler"]

NO_SCHEDULER_HELP = (
    "do not run the report scheduler (sampling and scheduled reports): for a second bot process "
    "on the same database; the first one runs it, and a second scheduler is refused at start"
)


def add_scheduler_flag(parser: argparse.ArgumentParser) -> None:
    """``--no-scheduler`` for the command that runs the bot."""
    parser.add_argument("--no-scheduler", action="store_true", help=NO_SCHEDULER_HELP)


def attach_reports(
    core: ChatCore,
    store: Store,
    settings: ReportSettings,
    metrics_transport: httpx.BaseTransport | None = None,
) -> ReportDesk:
    """A desk over the core's agent clients, set as the core's reporter."""
    context = core.context
    desk = ReportDesk(
        context.clients,
        store,
        settings,
        ServerMetricsSource(settings.metrics_urls, transport=metrics_transport),
        context.clock,
    )
    context.reporter = desk
    return desk


def start_scheduler(
    core: ChatCore,
    desk: ReportDesk,
    poster: ReportPoster,
    store: Store,
    settings: ReportSettings,
    clock: Clock | None = None,
) -> ReportScheduler:
    """Start the database's report scheduler; :class:`~bot.errors.SchedulerLocked` when another
    live bot process runs it."""
    scheduler = ReportScheduler(core.context, desk, poster, store, settings, clock=clock)
    scheduler.start()
    return scheduler
