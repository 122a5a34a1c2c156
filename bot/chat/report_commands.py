"""The capacity report commands: ``report`` now, and its schedules (``report every``,
``report daily``, ``report off``, ``report schedules``), one plain function each:
``(context, actor, command) -> Reply``; also :func:`capacity_report`, what a schedule posts.
A recommendation the samples call for is recorded as a proposal by the bot."""

from __future__ import annotations

from bot.chat.change_commands import propose
from bot.chat.fleet_commands import propose_for_replica
from bot.chat.grammar import Report, ReportDaily, ReportEvery, ReportOff, ReportSchedules
from bot.chat.handler_context import Context
from bot.chat.policy import Action, Actor
from bot.chat.replies import (
    HostReportView,
    ProblemReply,
    RefusalReply,
    Reply,
    ReportReply,
    ReportScheduledReply,
    ReportSchedulesReply,
    ReportStoppedReply,
)
from bot.chat.reporting import HostReview, Reporter
from bot.chat.shared_replies import refused
from bot.reports import Cadence, HostReport
from bot.store.records import ReportSchedule

__all__ = [
    "REPORTS_PROPOSER",
    "capacity_report",
    "report",
    "report_daily",
    "report_every",
    "report_off",
    "report_schedules",
]

#: Who proposes what a capacity report recommends (the bot, not the person who asked for it).
REPORTS_PROPOSER = "kimi-ops-reports"
_NO_REPORTS = (
    "capacity reports are not set up in this kimi-ops process ('status' shows the figures)"
)


def _host_view(ctx: Context, report: HostReport, review: HostReview) -> HostReportView:
    if not report.answered:
        return HostReportView(report)
    advice, proposal, for_fleet = review.advice, None, None
    if advice is not None:
        asked = advice.change.plan.requested_setting
        for_fleet = propose_for_replica(
            ctx, report.host, REPORTS_PROPOSER, asked.ratio, asked.size_gb
        )
        if for_fleet is None:
            proposal = propose(ctx, report.host, REPORTS_PROPOSER, advice.change, advice.current)
    return HostReportView(
        report,
        chart=review.chart,
        proposal=proposal,
        evidence=None if advice is None else advice.evidence,
        fleet_proposal=for_fleet,
    )


def capacity_report(
    ctx: Context, host: str | None, schedule: ReportSchedule | None = None
) -> ReportReply | ProblemReply:
    """Every host's report (or ``host``'s), asked in parallel; a recommendation the samples call
    for is recorded as a proposal. Also what a report schedule posts."""
    if ctx.reporter is None:
        return ProblemReply(_NO_REPORTS)
    if host is not None:
        names: tuple[str, ...] = (ctx.settings.host(host).name,)
    else:
        default = ctx.settings.default_host.name
        names = tuple(sorted(ctx.settings.host_names, key=lambda n: n != default))
    reports = ctx.reporter.gather(names)
    reviews = ctx.reporter.review(reports)
    views = tuple(_host_view(ctx, r, review) for r, review in zip(reports, reviews, strict=True))
    return ReportReply(views, schedule)


def report(ctx: Context, actor: Actor, command: Report) -> Reply:
    return capacity_report(ctx, command.host)


def _scheduler_of(ctx: Context, actor: Actor) -> Reporter | ProblemReply | RefusalReply:
    """The reporter when ``actor`` may change schedules here; else the reply saying why not."""
    if ctx.reporter is None:
        return ProblemReply(_NO_REPORTS)
    refusal = ctx.policy.may(actor, Action.SCHEDULE)
    return ctx.reporter if refusal is None else refused(ctx, refusal)


def _schedule(ctx: Context, actor: Actor, cadence: Cadence) -> Reply:
    reporter = _scheduler_of(ctx, actor)
    if isinstance(reporter, ProblemReply | RefusalReply):
        return reporter
    found = reporter.schedule(ctx.channel, cadence, actor.id)
    return ReportScheduledReply(found, cadence.shown, reporter.timezone)


def report_every(ctx: Context, actor: Actor, command: ReportEvery) -> Reply:
    return _schedule(ctx, actor, Cadence(every_s=command.interval_s))


def report_daily(ctx: Context, actor: Actor, command: ReportDaily) -> Reply:
    return _schedule(ctx, actor, Cadence(daily=(command.hour, command.minute)))


def report_off(ctx: Context, actor: Actor, command: ReportOff) -> Reply:
    reporter = _scheduler_of(ctx, actor)
    if isinstance(reporter, ProblemReply | RefusalReply):
        return reporter
    return ReportStoppedReply(ctx.channel, reporter.unschedule(ctx.channel))


def report_schedules(ctx: Context, actor: Actor, command: ReportSchedules) -> Reply:
    if ctx.reporter is None:
        return ProblemReply(_NO_REPORTS)
    found = ctx.reporter.schedules()
    shown = tuple(Cadence.parse(s.cadence).shown for s in found)
    return ReportSchedulesReply(found, shown, ctx.reporter.timezone)
