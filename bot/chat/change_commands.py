"""The commands that change something: ``resize`` (a proposal), ``apply``, ``cancel``,
``restart`` and ``rollback``, one plain function each: ``(context, actor, command) -> Reply``.

They decide and record; they never format text for a surface. An operation an agent accepted is
recorded and watched to its end by :func:`watch_started`, which the bot's start also uses for the
operations a dead bot left unrecorded (:mod:`bot.chat.adoption`).
"""

from __future__ import annotations

from datetime import datetime

from bot.agent_json import AgentOperation, PlannedChange
from bot.chat.agent_client import AgentClient
from bot.chat.audit import RollbackTarget, Watch
from bot.chat.claims import operation_for_claim
from bot.chat.config import HostSettings
from bot.chat.grammar import Apply, Cancel, Resize, Restart, Rollback
from bot.chat.handler_context import Context
from bot.chat.policy import Action, Actor, ProposalTerms, Refusal, RefusalKind
from bot.chat.replies import CancelledReply, OperationReply, ProblemReply, ProposalReply, Reply
from bot.chat.shared_replies import refused
from bot.chat.wording import rollback_to_off_text
from bot.errors import (
    AgentBusy,
    AgentError,
    AgentPlanRefused,
    AgentStale,
    AgentUnreachable,
    ConfigError,
    InputError,
    NotFound,
)
from bot.vocab import OperationKind

__all__ = [
    "RECORD_PATIENCE_S",
    "apply",
    "cancel",
    "propose",
    "resize",
    "restart",
    "rollback",
    "watch_started",
]

#: How long the recording of an operation the agent accepted waits for that agent to answer.
RECORD_PATIENCE_S = 120.0
_RECORD_RETRY_S = 1.0


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
    return propose(ctx, host.name, actor.id, change, current)


def propose(
    ctx: Context,
    host: str,
    proposed_by: str,
    change: PlannedChange,
    current: str | None,
    rollback: RollbackTarget | None = None,
) -> ProposalReply:
    """Record ``change`` as a proposal: the one path for ``resize``, ``rollback`` (``rollback``
    names the revision it returns to) and recommendations."""
    now = ctx.clock.now()
    terms = ctx.audit.record_proposal(
        host,
        proposed_by,
        change,
        now,
        ctx.policy.expires_at(now),
        ctx.channel,
        returns_to=None if rollback is None else rollback.revision,
    )
    return ProposalReply(
        id=terms.id,
        host=host,
        plan=change.plan,
        proposed_by=proposed_by,
        expires_at=ctx.policy.expires_at(now),
        current=current,
        rollback=rollback,
    )


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
        return refused(ctx, refusal)
    claimed = ctx.audit.claim_apply(terms.id, actor.id, now)
    if claimed.settled_by != actor.id or claimed.settled_at != now:
        lost = ctx.policy.check_apply(actor, claimed, now, None)
        assert lost is not None  # the proposal is settled: LOCKED
        return refused(ctx, lost)
    return _submit(ctx, actor, host, claimed)


def _submit(ctx: Context, actor: Actor, host: HostSettings, terms: ProposalTerms) -> Reply:
    try:
        if terms.returns_to is not None:
            # The agent numbers its revisions itself: it is sent its own id of the config.
            operation = ctx.client(host).submit(
                OperationKind.ROLLBACK,
                actor=actor.id,
                revision=terms.agent_revision,
                fingerprint=terms.fingerprint,
            )
        else:
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
            return watch_started(
                ctx, host, sent, terms.proposed_by, actor.id, terms.id, terms.returns_to
            )
        if answered:
            ctx.audit.settle_refused(terms.id)  # it never started
        return ProblemReply(str(exc), host.name)
    except AgentError as exc:
        ctx.audit.settle_refused(terms.id)
        return _agent_refused(ctx, actor, host, Action.APPLY, exc, terms.id)
    return watch_started(
        ctx, host, operation, terms.proposed_by, actor.id, terms.id, terms.returns_to
    )


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
    return refused(ctx, refusal)


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
    returns_to: int | None = None,
) -> OperationReply:
    """Record ``operation``, which the agent accepted, and watch it to its end; ``returns_to``
    is the history's revision a rollback returns to, named in its title."""
    plan = operation.plan
    watch = Watch(
        host=host.name,
        operation_id=operation.id,
        title=_title(host.name, operation, returns_to),
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


def _title(host: str, operation: AgentOperation, returns_to: int | None = None) -> str:
    if operation.kind is OperationKind.RESIZE and operation.plan is not None:
        return f"Resize {host}: hicache {operation.plan.setting}"
    if operation.kind is OperationKind.ROLLBACK:
        if returns_to is not None and operation.plan is not None:
            return f"Roll back {host} to revision {returns_to}: hicache {operation.plan.setting}"
        return f"Roll back {host}"
    if operation.kind is OperationKind.LIVE:
        return f"Live HiCache change on {host}"
    if operation.kind is OperationKind.RECONFIGURE:
        return f"Reconfigure {host}"
    return f"Restart {host}"


def restart(ctx: Context, actor: Actor, command: Restart) -> Reply:
    host = ctx.settings.host(command.host)
    refusal = ctx.policy.may(actor, Action.RESTART, host.name)
    if refusal is not None:
        return refused(ctx, refusal)
    try:
        operation = ctx.client(host).submit(OperationKind.RESTART, actor=actor.id)
    except AgentError as exc:
        return _agent_refused(ctx, actor, host, Action.RESTART, exc)
    return watch_started(ctx, host, operation, None, actor.id, None)


def rollback(ctx: Context, actor: Actor, command: Rollback) -> Reply:
    """Propose returning to revision N of the history (the audit's number, the one ``history``
    shows), or to the host's last other config that ran: a proposal with Apply like a resize,
    planned on today's facts; apply sends the agent its own id of that config."""
    name = command.host
    if name is None and command.revision is None:
        name = ctx.settings.host(None).name
    try:
        target = ctx.audit.rollback_target(name, command.revision)
        host = ctx.settings.host(target.host)
    except (NotFound, InputError, ConfigError) as exc:
        return ProblemReply(str(exc), name)
    except AgentError as exc:
        return ProblemReply(str(exc), name)
    refusal = ctx.policy.may(actor, Action.ROLLBACK, host.name)
    if refusal is not None:
        return refused(ctx, refusal)
    effective = target.setting.effective()
    if not effective.enabled:
        return ProblemReply(rollback_to_off_text(target), host.name)
    client = ctx.client(host)
    try:
        change = client.plan(ratio=effective.ratio, size_gb=effective.size_gb)
    except AgentError as exc:
        return ProblemReply(str(exc), host.name)
    try:
        current = client.status().effective
    except AgentError:
        current = None
    return propose(ctx, host.name, actor.id, change, current, rollback=target)


def cancel(ctx: Context, actor: Actor, command: Cancel) -> Reply:
    try:
        terms = ctx.audit.proposal(command.proposal_id)
    except NotFound as exc:
        return ProblemReply(str(exc))
    refusal = ctx.policy.check_cancel(actor, terms)
    if refusal is not None:
        return refused(ctx, refusal)
    ctx.audit.cancel(terms.id, actor.id, ctx.clock.now())
    return CancelledReply(terms.id, actor.id)
