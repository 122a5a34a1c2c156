"""The fleet commands, one plain function each: ``(context, actor, command) -> Reply``.

A fleet resize is a proposal like a single host's: every replica is planned first (one refusal
refuses all, naming the host and the arithmetic), each replica's plan is recorded as its own
proposal (so each host's history shows it), and the rollout is recorded with a line per
replica. Applying the first replica's proposal number (the one the reply shows) applies the
whole rollout, under the same policy as a single host: who may apply, the second person, expiry,
and void once another operation ran on any replica. ``restart fleet`` and ``rollback fleet``
need no proposal, as for one host; ``rollback fleet`` undoes only the replicas the fleet's last
resize changed, one by one with the same drain, each line naming the config it returns to.

Every agent of the fleet is asked before anything is recorded as running: one that does not
answer refuses the command, naming it (exit 3 in the terminal, an answer in Slack), as does a
fleet already in a rollout. A replica that serves but is out of the router is shown by
``fleets`` and put back by ``resume fleet`` or ``fleet <name> rejoin <host>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime

from bot.chat import change_commands
from bot.chat.config import HostSettings
from bot.chat.grammar import (
    Apply,
    Cancel,
    FleetRejoin,
    FleetResize,
    FleetRestart,
    FleetResume,
    FleetRollback,
    Fleets,
    Resize,
    Restart,
    Rollback,
)
from bot.chat.handler_context import Context
from bot.chat.policy import Action, Actor, ProposalState, ProposalTerms, RefusalKind
from bot.chat.replies import (
    CancelledReply,
    FleetAnswer,
    FleetProposalReply,
    FleetRefusalReply,
    FleetsReply,
    ProblemReply,
    RejoinReply,
    Reply,
    RolloutReply,
)
from bot.chat.shared_replies import ask_all, refused
from bot.clock import Clock
from bot.errors import AgentError, FleetBusy, NotFound
from bot.fleet.config import FleetSettings
from bot.fleet.desk import ClosingRouter, FleetDesk, RolloutSink, router_of, view_of
from bot.fleet.plan import FleetChange, FleetRefusal
from bot.fleet.rejoin import serving_out
from bot.fleet.view import ReplicaView, RolloutView
from bot.store import RevisionOutcome, RolloutRecord, Store
from bot.vocab import (
    OperationKind,
    ReplicaPhase,
    RolloutState,
)

__all__ = [
    "apply",
    "attach_fleets",
    "cancel",
    "fleet_of",
    "fleet_rejoin",
    "fleet_resize",
    "fleet_restart",
    "fleet_resume",
    "fleet_rollback",
    "fleets",
    "host_resize",
    "host_restart",
    "host_rollback",
]

_NO_FLEETS = "no fleet is configured in this kimi-ops process (add a [fleets.NAME] section)"
#: A replica's end, as its own proposal's revision records it.
_OUTCOME = {
    ReplicaPhase.DONE: RevisionOutcome.READY,
    ReplicaPhase.ROLLED_BACK: RevisionOutcome.FAILED,
    ReplicaPhase.FAILED: RevisionOutcome.FAILED,
}


class _AuditingSink:
    """Hands views to the front end, and records each replica's end on its own proposal's
    revision (ready, or failed when its new config did not come up)."""

    def __init__(self, front: RolloutSink, store: Store, clock: Clock) -> None:
        self.front = front
        self.store = store
        self.clock = clock

    def rollout(self, view: RolloutView) -> None:
        self.front.rollout(view)

    def replica_ended(self, view: RolloutView, host: str) -> None:
        line = view.replica(host)
        outcome = _OUTCOME.get(line.phase)
        if line.proposal_id is not None and outcome is not None:
            revision_id = self.store.proposal(line.proposal_id).revision_id
            if self.store.revision(revision_id).outcome is RevisionOutcome.APPLIED:
                self.store.record_outcome(revision_id, outcome, at=self.clock.now())
        self.front.replica_ended(view, host)


def attach_fleets(
    ctx: Context,
    store: Store,
    fleets: Mapping[str, FleetSettings],
    front: RolloutSink,
    event_wait_s: float = 20.0,
    router: Callable[[FleetSettings], ClosingRouter] = router_of,
) -> FleetDesk:
    """Give ``ctx`` its fleet desk over the agents it already holds (``router`` makes each
    fleet's router client); the caller resumes it."""
    desk = FleetDesk(
        fleets,
        store,
        ctx.clients,
        _AuditingSink(front, store, ctx.clock),
        ctx.clock,
        router=router,
        event_wait_s=event_wait_s,
    )
    ctx.fleets = desk
    return desk


def _desk(ctx: Context, name: str) -> FleetDesk | ProblemReply:
    if ctx.fleets is None:
        return ProblemReply(_NO_FLEETS)
    try:
        ctx.fleets.fleet(name)
    except NotFound as exc:
        return ProblemReply(str(exc))
    return ctx.fleets


def propose_for_replica(
    ctx: Context, host: str, proposed_by: str, ratio: float | None, size_gb: int | None
) -> FleetProposalReply | FleetRefusalReply | None:
    """A recommendation for ``host``, when it is a fleet's replica, as a proposal for its whole
    fleet (None for a host in no fleet): every replica planned, applied one by one through the
    router."""
    fleet = fleet_of(ctx, host)
    if fleet is None:
        return None
    reply = fleet_resize(ctx, Actor(proposed_by), FleetResize(fleet, ratio=ratio, size_gb=size_gb))
    assert isinstance(reply, FleetProposalReply | FleetRefusalReply), reply
    return reply


def fleet_resize(ctx: Context, actor: Actor, command: FleetResize) -> Reply:
    """Plan every replica; a refusal is recorded and shown, else one proposal per replica."""
    desk = _desk(ctx, command.fleet)
    if isinstance(desk, ProblemReply):
        return desk
    change = FleetChange(OperationKind.RESIZE, ratio=command.ratio, size_gb=command.size_gb)
    planned = desk.plan(command.fleet, change)
    if isinstance(planned, FleetRefusal):
        desk.refuse(planned, change, actor.id, ctx.channel)
        return FleetRefusalReply(planned)
    now = ctx.clock.now()
    expires = ctx.policy.expires_at(now)
    lines = []
    for line in planned.replicas:
        terms = ctx.audit.record_proposal(
            line.host, actor.id, planned.changes[line.host], now, expires, ctx.channel
        )
        lines.append(replace(line, proposal_id=terms.id))
    record = desk.propose(command.fleet, change, lines, actor.id, ctx.channel, expires)
    return FleetProposalReply(_shown_id(record), view_of(record), actor.id, expires)


def _shown_id(record: RolloutRecord) -> int:
    first = record.replicas[0].proposal_id
    assert first is not None  # a proposed rollout records one proposal per replica
    return first


def _terms(record: RolloutRecord, shown: ProposalTerms) -> ProposalTerms:
    """The rollout as one proposal to policy: its first replica's (the one shown, which a
    Cancel settles), or once the rollout has started, settled by whoever started it."""
    if record.state is RolloutState.PROPOSED:
        return replace(shown, host=f"fleet {record.fleet}")
    if record.state is RolloutState.CANCELLED:
        # Withdrawn (the proposal says by whom) or expired (the store ended it on time).
        state = ProposalState.EXPIRED if shown.state is ProposalState.OPEN else shown.state
        return replace(shown, host=f"fleet {record.fleet}", state=state)
    return replace(
        shown,
        host=f"fleet {record.fleet}",
        state=ProposalState.APPLIED,
        settled_by=record.applied_by,
        settled_at=record.started_at,
    )


def _last_operation_at(
    ctx: Context, hosts: tuple[str, ...]
) -> datetime | tuple[tuple[str, str], ...] | None:
    """The newest operation's start over ``hosts`` (None: none ran), or each host whose agent
    did not answer and why."""

    def newest(host: str) -> tuple[str, datetime | None, str | None]:
        try:
            found = ctx.clients[host].operations(limit=1)
        except AgentError as exc:
            return host, None, f"its agent does not answer ({exc}); nothing was touched"
        return host, (found[0].created_at if found else None), None

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        answers = list(pool.map(newest, hosts))
    silent = tuple((host, why) for host, _, why in answers if why is not None)
    if silent:
        return silent
    return max((at for _, at, _ in answers if at is not None), default=None)


def fleet_of(ctx: Context, host: str) -> str | None:
    """The fleet ``host`` serves in, if any (a host is a replica of one fleet at most that
    matters: the first that names it)."""
    if ctx.fleets is None:
        return None
    return next((name for name, f in ctx.fleets.fleets.items() if host in f.hosts), None)


def _single_host_refused(ctx: Context, host: str | None, what: str, fleet_cmd: str) -> Reply | None:
    """A single-host change on a fleet's replica is refused: it would restart the replica while
    the router still sends it requests (they fail), and leave max_unavailable uncounted. The
    fleet's own command drains it through the router first."""
    name = ctx.settings.host(host).name
    fleet = fleet_of(ctx, name)
    if fleet is None:
        return None
    why = (
        f"{name} is a replica of fleet {fleet}: a single-host {what} would restart it while "
        f"fleet {fleet}'s router still sends it requests; use '{fleet_cmd.format(fleet=fleet)}', "
        "which takes each replica out of the router and drains it first"
    )
    return FleetRefusalReply(FleetRefusal(fleet, f"{what} on {name}", ((name, why),), ()))


def host_resize(ctx: Context, actor: Actor, command: Resize) -> Reply:
    """``resize ... [host]``: refused on a fleet's replica, else the host's proposal."""
    value = f"size {command.size_gb}" if command.size_gb is not None else f"ratio {command.ratio:g}"
    blocked = _single_host_refused(ctx, command.host, "resize", f"resize {value} fleet {{fleet}}")
    return blocked or change_commands.resize(ctx, actor, command)


def host_restart(ctx: Context, actor: Actor, command: Restart) -> Reply:
    """``restart [host]``: refused on a fleet's replica, else the host's restart."""
    blocked = _single_host_refused(ctx, command.host, "restart", "restart fleet {fleet}")
    return blocked or change_commands.restart(ctx, actor, command)


def host_rollback(ctx: Context, actor: Actor, command: Rollback) -> Reply:
    """``rollback [revision] [host]``: refused on a fleet's replica, else the host's."""
    blocked = _single_host_refused(ctx, command.host, "rollback", "rollback fleet {fleet}")
    return blocked or change_commands.rollback(ctx, actor, command)


def apply(ctx: Context, actor: Actor, command: Apply) -> Reply:
    """``apply <id>``: a fleet's proposal starts its rollout; any other goes to the host,
    unless the host is a fleet's replica (a proposal made before it joined the fleet, or a
    report's recommendation): that is refused, naming the fleet command."""
    record = None
    if ctx.fleets is not None:
        record = ctx.fleets.store.rollout_by_proposal(command.proposal_id)
    if record is None:
        try:
            terms = ctx.audit.proposal(command.proposal_id)
        except NotFound:
            terms = None
        if terms is not None and terms.host in ctx.settings.host_names:
            setting = (
                f"size {terms.size_gb}" if terms.size_gb is not None else f"ratio {terms.ratio:g}"
            )
            blocked = _single_host_refused(
                ctx, terms.host, f"proposal #{terms.id}", f"resize {setting} fleet {{fleet}}"
            )
            if blocked is not None:
                return blocked
        return change_commands.apply(ctx, actor, command)
    desk = ctx.fleets
    assert desk is not None
    shown = _shown_id(record)
    terms = _terms(record, ctx.audit.proposal(shown))
    last_at = _last_operation_at(ctx, tuple(r.host for r in record.replicas))
    if isinstance(last_at, tuple):
        return FleetRefusalReply(FleetRefusal(record.fleet, record.change, last_at, ()))
    refusal = ctx.policy.check_apply(actor, terms, ctx.clock.now(), last_at)
    if refusal is not None:
        if refusal.kind in (RefusalKind.EXPIRED, RefusalKind.STALE):
            for line in record.replicas:
                if line.proposal_id is not None:
                    ctx.audit.settle_expired(line.proposal_id)
            desk.store.cancel_rollout(
                record.id, f"{refusal.kind.value} before it was applied", ctx.clock.now()
            )
        return refused(ctx, refusal)
    try:
        started = desk.start(record.id, actor.id)
    except FleetBusy as exc:
        return _busy(record.fleet, record.change, exc)
    if started.applied_by != actor.id:
        lost = ctx.policy.check_apply(actor, _terms(started, terms), ctx.clock.now(), None)
        assert lost is not None  # started by another: LOCKED
        return refused(ctx, lost)
    for line in record.replicas:
        if line.proposal_id is not None:
            ctx.audit.claim_apply(line.proposal_id, actor.id, started.started_at or ctx.clock.now())
    return RolloutReply(view_of(started))


def cancel(ctx: Context, actor: Actor, command: Cancel) -> Reply:
    """``cancel <id>``: a fleet's proposal ends its rollout cancelled, with every replica's
    proposal; any other goes to the host."""
    if ctx.fleets is None:
        return change_commands.cancel(ctx, actor, command)
    store = ctx.fleets.store
    record = store.rollout_by_proposal(command.proposal_id)
    if record is None:
        return change_commands.cancel(ctx, actor, command)
    shown = _shown_id(record)
    terms = _terms(record, ctx.audit.proposal(shown))
    refusal = ctx.policy.check_cancel(actor, terms)
    if refusal is not None:
        return refused(ctx, refusal)
    now = ctx.clock.now()
    for line in record.replicas:
        if line.proposal_id is not None:
            ctx.audit.cancel(line.proposal_id, actor.id, now)
    store.cancel_rollout(record.id, f"cancelled by {actor.id}", now)
    return CancelledReply(shown, actor.id)


def _busy(name: str, change: str, exc: FleetBusy) -> FleetRefusalReply:
    """A fleet already in a rollout refuses another (nothing touched): a refusal, not an
    error."""
    return FleetRefusalReply(FleetRefusal(name, change, ((f"fleet {name}", str(exc)),), ()))


def _direct(ctx: Context, actor: Actor, name: str, change: FleetChange, action: Action) -> Reply:
    desk = _desk(ctx, name)
    if isinstance(desk, ProblemReply):
        return desk
    refusal = ctx.policy.may(actor, action, f"fleet {name}")
    if refusal is not None:
        return refused(ctx, refusal)
    replicas: tuple[ReplicaView, ...] = ()
    if change.kind is OperationKind.ROLLBACK:
        undo = _to_undo(desk, name)
        if isinstance(undo, ProblemReply):
            return undo
    try:
        desk.refuse_busy(name)
    except FleetBusy as exc:
        return _busy(name, change.label, exc)
    planned = desk.plan(name, change)
    if isinstance(planned, FleetRefusal):
        desk.refuse(planned, change, actor.id, ctx.channel)
        return FleetRefusalReply(planned)
    replicas = planned.replicas
    if change.kind is OperationKind.ROLLBACK:
        assert not isinstance(undo, ProblemReply)
        replicas = tuple(
            replace(line, new_config=undo[line.host]) for line in replicas if line.host in undo
        )
    try:
        record = desk.begin(name, change, replicas, actor.id, ctx.channel)
    except FleetBusy as exc:
        return _busy(name, change.label, exc)
    return RolloutReply(view_of(record))


def _to_undo(desk: FleetDesk, name: str) -> dict[str, str | None] | ProblemReply:
    """The replicas ``rollback fleet`` returns, each to the config it had before the fleet's
    last rollout: only a resize changes configs, so after a restart or a rollback there is
    nothing to undo (an agent's rollback would go past them to the resize before)."""
    last = desk.store.last_rollout(name)
    if last is None:
        return ProblemReply(f"fleet {name}'s last rollout changed no replica to undo")
    if last.kind is not OperationKind.RESIZE:
        return ProblemReply(
            f"fleet {name}'s last rollout (#{last.id}, {last.change}) changed no config to "
            "undo; 'rollback <revision> <host>' returns one replica to a config of its history"
        )
    changed = {r.host: r.old_config for r in last.replicas if r.phase is ReplicaPhase.DONE}
    if not changed:
        return ProblemReply(
            f"fleet {name}'s last rollout (#{last.id}, {last.change}) changed no replica to undo"
        )
    return changed


def fleet_restart(ctx: Context, actor: Actor, command: FleetRestart) -> Reply:
    return _direct(ctx, actor, command.fleet, FleetChange(OperationKind.RESTART), Action.RESTART)


def fleet_rollback(ctx: Context, actor: Actor, command: FleetRollback) -> Reply:
    """Undo the replicas the last rollout changed: each returns to its last ready config."""
    change = FleetChange(OperationKind.ROLLBACK)
    return _direct(ctx, actor, command.fleet, change, Action.ROLLBACK)


def fleet_resume(ctx: Context, actor: Actor, command: FleetResume) -> Reply:
    """Carry on the fleet's unfinished rollout, or retry a stopped one's remaining replicas."""
    desk = _desk(ctx, command.fleet)
    if isinstance(desk, ProblemReply):
        return desk
    refusal = ctx.policy.may(actor, Action.APPLY, f"fleet {command.fleet}")
    if refusal is not None:
        return refused(ctx, refusal)
    resumed = desk.resume(command.fleet)
    if resumed:
        return RolloutReply(view_of(resumed[0]), resumed=True)
    last = desk.store.last_rollout(command.fleet)
    if last is None or last.state is not RolloutState.STOPPED:
        running = desk.running_in(command.fleet)
        if running is not None:
            return ProblemReply(f"fleet {command.fleet} is running here")
        return _rejoin_serving(ctx, desk, command.fleet)
    desk.store.save_rollout(last.id, RolloutState.RUNNING, last.replicas, None,
                            at=ctx.clock.now())  # fmt: skip
    resumed = desk.resume(command.fleet)
    return RolloutReply(view_of(resumed[0]) if resumed else view_of(last), resumed=True)


def _rejoin_serving(ctx: Context, desk: FleetDesk, name: str) -> Reply:
    """``resume fleet`` with no rollout to carry on: put back every replica that serves but is
    out of the router, each after its health and breaker are checked."""
    fleet = desk.fleet(name)
    listing = desk.listing(name)
    if listing.workers is None:
        return ProblemReply(f"fleet {name} has nothing to resume, and {listing.problem}")
    agents = {h: ctx.clients[h] for h in fleet.hosts}
    out = serving_out(fleet, listing.holds, dict(agents))
    if not out:
        return ProblemReply(f"fleet {name} has nothing to resume")
    return _rejoin_hosts(desk, name, out)


def _rejoin_hosts(desk: FleetDesk, name: str, hosts: tuple[str, ...]) -> Reply:
    try:
        return RejoinReply(name, tuple(desk.rejoin(name, host) for host in hosts))
    except FleetBusy as exc:
        return _busy(name, f"rejoin {', '.join(hosts)}", exc)


def fleet_rejoin(ctx: Context, actor: Actor, command: FleetRejoin) -> Reply:
    """``fleet <name> rejoin <host>``: put one replica back in the router once it serves."""
    desk = _desk(ctx, command.fleet)
    if isinstance(desk, ProblemReply):
        return desk
    refusal = ctx.policy.may(actor, Action.APPLY, f"fleet {command.fleet}")
    if refusal is not None:
        return refused(ctx, refusal)
    try:
        return _rejoin_hosts(desk, command.fleet, (command.host,))
    except NotFound as exc:
        return ProblemReply(str(exc))


def fleets(ctx: Context, actor: Actor, command: Fleets) -> Reply:
    """Every fleet with its replicas' status (config, health), in rollout order: which the
    router does not hold, whether the router answers, and the last rollout when it stopped."""
    if ctx.fleets is None:
        return ProblemReply(_NO_FLEETS)
    desk = ctx.fleets
    answers = []
    for name, fleet in desk.fleets.items():
        hosts: list[HostSettings] = [ctx.settings.host(h) for h in fleet.hosts]
        with ThreadPoolExecutor(max_workers=2) as pool:
            asked = pool.submit(ask_all, ctx, tuple(h.name for h in hosts))
            listed = pool.submit(desk.listing, name)
            replicas, listing = asked.result(), listed.result()
        running = desk.running_in(name)
        last = desk.store.last_rollout(name)
        stopped = last if last is not None and last.state is RolloutState.STOPPED else None
        out: tuple[str, ...] = ()
        if listing.workers is not None:
            out = tuple(
                answer.host
                for answer in replicas
                if not listing.holds(
                    fleet.url(answer.host, None if answer.status is None
                              else answer.status.router_url) or ""
                )
            )  # fmt: skip
        answers.append(
            FleetAnswer(
                name,
                fleet.router,
                replicas,
                None if running is None else view_of(running),
                stopped=None if stopped is None else view_of(stopped),
                router_problem=listing.problem,
                out_of_router=out,
            )
        )
    return FleetsReply(tuple(answers))
