"""One plain function per command: ``(context, actor, command) -> Reply``.

Handlers decide and record; they never format text for a surface. :mod:`bot.chat.core` only
maps each command type to its handler, so any handler can be called in a test with a context
built from real parts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from bot.agent_json import AgentOperation, AgentStatus, PlannedChange
from bot.chat._usage import help_lines
from bot.chat.agent_client import AgentClient
from bot.chat.audit import Audit, Watch
from bot.chat.claims import operation_for_claim
from bot.chat.config import ChatSettings, HostSettings
from bot.chat.grammar import (
    Apply,
    Cancel,
    Help,
    History,
    Hosts,
    Report,
    ReportDaily,
    ReportEvery,
    ReportOff,
    ReportSchedules,
    Resize,
    Restart,
    Rollback,
    Status,
)
from bot.chat.policy import Action, Actor, Policy, ProposalTerms, Refusal, RefusalKind
from bot.chat.replies import (
    CancelledReply,
    HelpReply,
    HistoryReply,
    HostAnswer,
    HostReportView,
    HostsReply,
    OperationReply,
    ProblemReply,
    ProposalReply,
    RefusalReply,
    Reply,
    ReportReply,
    ReportScheduledReply,
    ReportSchedulesReply,
    ReportStoppedReply,
    StatusReply,
)
from bot.chat.reporting import Reporter
from bot.chat.watcher import WatcherPool
from bot.chat.wording import refusal_text
from bot.clock import Clock
from bot.errors import (
    AgentBusy,
    AgentError,
    AgentPlanRefused,
    AgentStale,
    AgentUnreachable,
    NotFound,
)
from bot.reports import Cadence, HostReport
from bot.store.records import ReportSchedule
from bot.vocab import OperationKind

if TYPE_CHECKING:
    from bot.fleet.desk import FleetDesk

__all__ = [
    "RECORD_PATIENCE_S",
    "REPORTS_PROPOSER",
    "Context",
    "apply",
    "cancel",
    "capacity_report",
    "help_",
    "history",
    "hosts",
    "import_foreign",
    "report",
    "report_daily",
    "report_every",
    "report_off",
    "report_schedules",
    "resize",
    "restart",
    "rollback",
    "status",
    "watch_started",
]

DEFAULT_HISTORY = 10
#: How long the recording of an operation the agent accepted waits for that agent to answer.
RECORD_PATIENCE_S = 120.0
_RECORD_RETRY_S = 1.0
#: Who proposes what a capacity report recommends (the bot, not the person who asked for it).
REPORTS_PROPOSER = "kimi-ops-reports"


@dataclass
class Context:
    """What handlers work with; built once per process by :func:`bot.chat.core.build_core`."""

    settings: ChatSettings
    policy: Policy
    audit: Audit
    clients: Mapping[str, AgentClient]
    clock: Clock
    watchers: WatcherPool
    channel: str = "terminal"
    silent_since: dict[str, datetime] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Two history commands at once must not import one foreign operation twice.
    import_lock: threading.Lock = field(default_factory=threading.Lock)
    # Capacity reports and their schedules; None where this process has none set up.
    reporter: Reporter | None = None
    # Fleets and their rollouts; None where no [fleets.*] is configured.
    fleets: FleetDesk | None = None

    def client(self, host: HostSettings) -> AgentClient:
        return self.clients[host.name]


def help_(ctx: Context, actor: Actor, command: Help) -> Reply:
    # report daily HH:MM is read in [reports] timezone, so help says which zone that is.
    return HelpReply(help_lines("UTC" if ctx.reporter is None else ctx.reporter.timezone))


def _ask_all(ctx: Context, names: tuple[str, ...]) -> tuple[HostAnswer, ...]:
    """Every host's status at once; a host that does not answer is listed with its problem and
    the time it was first seen silent."""
    hosts = [ctx.settings.host(name) for name in names]

    def ask(host: HostSettings) -> HostAnswer:
        try:
            found: AgentStatus | None = ctx.client(host).status()
            problem = None
        except AgentError as exc:
            found, problem = None, str(exc)
        with ctx.lock:
            if problem is None:
                ctx.silent_since.pop(host.name, None)
                since = None
            else:
                since = ctx.silent_since.setdefault(host.name, ctx.clock.now())
        return HostAnswer(host.name, host.url, host.default, found, problem, since)

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return tuple(pool.map(ask, hosts))


def status(ctx: Context, actor: Actor, command: Status) -> Reply:
    """One host when named, else every host (the default first)."""
    if command.host is not None:
        return StatusReply(_ask_all(ctx, (command.host,)))
    names = sorted(ctx.settings.host_names, key=lambda n: n != ctx.settings.default_host.name)
    return StatusReply(_ask_all(ctx, tuple(names)))


def hosts(ctx: Context, actor: Actor, command: Hosts) -> Reply:
    return HostsReply(_ask_all(ctx, ctx.settings.host_names))


def resize(ctx: Context, actor: Actor, command: Resize) -> Reply:
    """Ask the agent for a plan and record it as a proposal (a refused plan too)."""
    host = ctx.settings.host(command.host)
    client = ctx.client(host)
    try:
        change = client.plan(ratio=command.ratio, size_gb=command.size_gb)
    except AgentError as exc:  # a value SGLang rejects (the grammar stops most), or no answer
        return ProblemReply(str(exc), host.name)
    try:
        current = client.status().effective
    except AgentError:
        current = None
    return _propose(ctx, host.name, actor.id, change, current)


def _propose(
    ctx: Context, host: str, proposed_by: str, change: PlannedChange, current: str | None
) -> ProposalReply:
    """Record ``change`` as a proposal: the one path for ``resize`` and recommendations."""
    now = ctx.clock.now()
    terms = ctx.audit.record_proposal(
        host, proposed_by, change, now, ctx.policy.expires_at(now), ctx.channel
    )
    return ProposalReply(
        id=terms.id,
        host=host,
        plan=change.plan,
        proposed_by=proposed_by,
        expires_at=ctx.policy.expires_at(now),
        current=current,
    )


def _refused(ctx: Context, refusal: Refusal) -> RefusalReply:
    text = refusal_text(refusal)
    ctx.audit.record_refusal(refusal, text, ctx.clock.now(), ctx.channel)
    return RefusalReply(refusal, text)


def _last_operation_at(client: AgentClient) -> datetime | None:
    newest = client.operations(limit=1)
    return newest[0].created_at if newest else None


def apply(ctx: Context, actor: Actor, command: Apply) -> Reply:
    """Re-check policy and expiry, claim the proposal (one apply wins), start the operation."""
    try:
        terms = ctx.audit.proposal(command.proposal_id)
    except NotFound as exc:
        return ProblemReply(str(exc))
    host = ctx.settings.host(terms.host)
    client = ctx.client(host)
    try:
        last_at = _last_operation_at(client)
    except AgentError as exc:
        return ProblemReply(str(exc), host.name)
    now = ctx.clock.now()
    refusal = ctx.policy.check_apply(actor, terms, now, last_at)
    if refusal is not None:
        if refusal.kind in (RefusalKind.EXPIRED, RefusalKind.STALE):
            ctx.audit.settle_expired(terms.id)
        return _refused(ctx, refusal)
    claimed = ctx.audit.claim_apply(terms.id, actor.id, now)
    if claimed.settled_by != actor.id or claimed.settled_at != now:
        lost = ctx.policy.check_apply(actor, claimed, now, None)
        assert lost is not None  # the proposal is settled: LOCKED
        return _refused(ctx, lost)
    return _submit(ctx, actor, host, claimed)


def _submit(ctx: Context, actor: Actor, host: HostSettings, terms: ProposalTerms) -> Reply:
    try:
        operation = ctx.client(host).submit(
            OperationKind.RESIZE,
            actor=actor.id,
            ratio=terms.ratio,
            size_gb=terms.size_gb,
            fingerprint=terms.fingerprint,
        )
    except AgentUnreachable as exc:
        # The request may have reached the agent before the connection broke (the agent killed
        # right after accepting): ask it, once it answers, whether the operation started.
        answered, sent = _sent_anyway(ctx, host, terms)
        if sent is not None:
            return watch_started(ctx, host, sent, terms.proposed_by, actor.id, terms.id)
        if answered:
            ctx.audit.settle_refused(terms.id)  # it never started
        return ProblemReply(str(exc), host.name)
    except AgentError as exc:
        ctx.audit.settle_refused(terms.id)
        return _agent_refused(ctx, actor, host, Action.APPLY, exc, terms.id)
    return watch_started(ctx, host, operation, terms.proposed_by, actor.id, terms.id)


def _sent_anyway(
    ctx: Context, host: HostSettings, claimed: ProposalTerms
) -> tuple[bool, AgentOperation | None]:
    """Whether the agent answered within :data:`RECORD_PATIENCE_S`, and the operation the
    claimed proposal started there, if any (a silent agent: the next start of the bot looks
    again, :mod:`bot.chat.adoption`)."""
    deadline = ctx.clock.monotonic() + RECORD_PATIENCE_S
    while True:
        try:
            return True, operation_for_claim(ctx.client(host), claimed, ctx.audit)
        except AgentError:
            if ctx.clock.monotonic() >= deadline:
                return False, None
            ctx.clock.sleep(_RECORD_RETRY_S)


def _agent_refused(
    ctx: Context,
    actor: Actor,
    host: HostSettings,
    action: Action,
    exc: AgentError,
    proposal_id: int | None = None,
) -> Reply:
    """The agent's own refusals at apply time, answered and recorded like policy's."""
    if isinstance(exc, AgentBusy):
        refusal = Refusal(
            RefusalKind.LOCKED,
            action,
            actor.id,
            host.name,
            None,
            by=exc.holder,
            at=_parse(exc.since),
        )
    elif isinstance(exc, AgentStale):
        refusal = Refusal(
            RefusalKind.STALE, action, actor.id, host.name, proposal_id, at=ctx.clock.now()
        )
    elif isinstance(exc, AgentPlanRefused):
        reason = str(exc.plan.get("reason", exc))
        refusal = Refusal(RefusalKind.OVER_BUDGET, action, actor.id, host.name, proposal_id, reason)
    else:
        return ProblemReply(str(exc), host.name)
    return _refused(ctx, refusal)


def _parse(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def watch_started(
    ctx: Context,
    host: HostSettings,
    operation: AgentOperation,
    proposed_by: str | None,
    applied_by: str,
    proposal_id: int | None,
) -> OperationReply:
    """Record ``operation``, which the agent accepted, and watch it to its end."""
    plan = operation.plan
    watch = Watch(
        host=host.name,
        operation_id=operation.id,
        title=_title(host.name, operation),
        proposed_by=proposed_by,
        applied_by=applied_by,
        planned_gb_per_rank=None if plan is None else plan.per_rank_gb,
    )
    _record_started(ctx, watch, operation, proposal_id)
    ctx.watchers.ensure(watch)
    return OperationReply(watch, operation)


def _record_started(
    ctx: Context, watch: Watch, operation: AgentOperation, proposal_id: int | None
) -> None:
    """Record the accepted operation, which reads the agent's revisions: an agent that stops
    answering right after accepting (killed, restarting) is asked again for up to
    :data:`RECORD_PATIENCE_S`, as the operation goes on there; past that the error stands, and
    the next start of the bot finds a proposal's operation again (:mod:`bot.chat.adoption`)."""
    deadline = ctx.clock.monotonic() + RECORD_PATIENCE_S
    while True:
        try:
            ctx.audit.record_operation(watch, operation, proposal_id, ctx.channel)
            return
        except AgentError:
            if ctx.clock.monotonic() >= deadline:
                raise
            ctx.clock.sleep(_RECORD_RETRY_S)


def _title(host: str, operation: AgentOperation) -> str:
    if operation.kind is OperationKind.RESIZE and operation.plan is not None:
        return f"Resize {host}: hicache {operation.plan.setting}"
    if operation.kind is OperationKind.ROLLBACK:
        return f"Roll back {host}"
    return f"Restart {host}"


def _direct(
    ctx: Context, actor: Actor, host_name: str | None, action: Action, kind: OperationKind,
    revision: int | None = None,
) -> Reply:  # fmt: skip
    host = ctx.settings.host(host_name)
    refusal = ctx.policy.may(actor, action, host.name)
    if refusal is not None:
        return _refused(ctx, refusal)
    try:
        operation = ctx.client(host).submit(kind, actor=actor.id, revision=revision)
    except AgentError as exc:
        return _agent_refused(ctx, actor, host, action, exc)
    return watch_started(ctx, host, operation, None, actor.id, None)


def restart(ctx: Context, actor: Actor, command: Restart) -> Reply:
    return _direct(ctx, actor, command.host, Action.RESTART, OperationKind.RESTART)


def rollback(ctx: Context, actor: Actor, command: Rollback) -> Reply:
    return _direct(
        ctx, actor, command.host, Action.ROLLBACK, OperationKind.ROLLBACK, command.revision
    )


def cancel(ctx: Context, actor: Actor, command: Cancel) -> Reply:
    try:
        terms = ctx.audit.proposal(command.proposal_id)
    except NotFound as exc:
        return ProblemReply(str(exc))
    refusal = ctx.policy.check_cancel(actor, terms)
    if refusal is not None:
        return _refused(ctx, refusal)
    ctx.audit.cancel(terms.id, actor.id, ctx.clock.now())
    return CancelledReply(terms.id, actor.id)


def import_foreign(ctx: Context, names: tuple[str, ...], limit: int = 50) -> None:
    """Record the operations the agents ran that the audit does not know (started by another
    bot, an admin with curl, ...), and watch those still running. A silent agent is skipped:
    history then shows what the store holds."""

    def one(host: HostSettings) -> None:
        client = ctx.client(host)
        try:
            recent = client.operations(limit)
            for operation in reversed(recent):
                if ctx.audit.known(host.name, operation.id):
                    continue
                events = client.events(operation.id).events
                watch = ctx.audit.import_operation(host.name, operation, events)
                if not operation.finished:
                    ctx.watchers.ensure(watch)
        except AgentError:
            return

    hosts = [ctx.settings.host(name) for name in names]
    with ctx.import_lock, ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        list(pool.map(one, hosts))


def history(ctx: Context, actor: Actor, command: History) -> Reply:
    """The audit, after importing what the agents ran without this bot."""
    names = ctx.settings.host_names if command.host is None else (command.host,)
    import_foreign(ctx, names)
    entries = ctx.audit.history(command.host, command.limit or DEFAULT_HISTORY)
    return HistoryReply(command.host, tuple(entries))


_NO_REPORTS = (
    "capacity reports are not set up in this kimi-ops process ('status' shows the figures)"
)


def _host_view(ctx: Context, reporter: Reporter, report: HostReport) -> HostReportView:
    if not report.answered:
        return HostReportView(report)
    advice = reporter.advise(report)
    proposal = None
    if advice is not None:
        proposal = _propose(ctx, report.host, REPORTS_PROPOSER, advice.change, advice.current)
    return HostReportView(
        report,
        chart=reporter.chart(report),
        proposal=proposal,
        evidence=None if advice is None else advice.evidence,
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
    reporter = ctx.reporter
    views = tuple(_host_view(ctx, reporter, found) for found in reporter.gather(names))
    return ReportReply(views, schedule)


def report(ctx: Context, actor: Actor, command: Report) -> Reply:
    return capacity_report(ctx, command.host)


def _scheduler_of(ctx: Context, actor: Actor) -> Reporter | ProblemReply | RefusalReply:
    """The reporter when ``actor`` may change schedules here; else the reply saying why not."""
    if ctx.reporter is None:
        return ProblemReply(_NO_REPORTS)
    refusal = ctx.policy.may(actor, Action.SCHEDULE)
    return ctx.reporter if refusal is None else _refused(ctx, refusal)


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


Handler = Callable[[Context, Actor, object], Reply]
