"""What a host agent reports, recorded in the store's audit: the one mapping between the two.

The agent's SQLite is the host-local truth about operations and what it ran; the store is the
fleet-wide audit. This module turns the agent's answers into store records, linked by the agent's
ids, so the bot, the demo and any later importer write the same audit::

    record_agent_plan(store, "kimi-01", plans_answer, proposed_by="U0BEN")
    record_agent_proposal(store, "kimi-01", plans_answer, proposed_by="U0BEN", channel="C1", ...)
    record_agent_events(store, "kimi-01", 12, {"events": [...]})
    record_agent_operation(store, "kimi-01", operation_page, revisions_answer, revision_id=7)

The rules:

- a refused plan is a ``refused`` revision with the planner's real figures and reason (a figure
  it could not work out stays None, never 0), a fitting one a ``proposed`` revision;
- an operation's revision carries the agent's revision id and the full command line it wrote;
- events are appended by ``seq``: a page seen twice stores nothing twice; the outcome is
  recorded from the operation's final event, once a page has brought it;
- ``ready`` records what the start logged (startup seconds, device tokens, host GB and tokens
  per rank);
- ``failed`` keeps the failure's kind (:class:`~bot.vocab.FailureKind`) and decisive lines;
- ``rolled_back`` is a rollback, never a plain failure: the failed revision keeps its kind and
  lines and becomes ``rolled_back``, and a new revision (``rollback_of`` the failed one,
  ``returned_to`` the config the agent started again, with the agent's ids of both) records the
  rollback's own start, ``ready`` with its figures;
- a rollback a person asked for (kind ``rollback``) is recorded as the revision the agent ran,
  with its argv and ids; when it was proposed through the store (``returned_to`` set on its
  proposal) it is linked by ``rollback_of`` to the agent's revision it undid, which becomes
  ``rolled_back`` once the rollback is ready. One started elsewhere (curl) is not linked: the
  agent's answers do not say which revision it returned to.

Every answer is read whole (by :mod:`bot.agent_json`, the reader the bot core uses too) before
anything is written; an answer this kimi-ops cannot read raises :class:`~bot.errors.AgentError`
and records nothing. Recording the same answer again changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.agent_json import (
    AgentEvent,
    AgentOperation,
    AgentPlan,
    AgentRevision,
    StartFigures,
    read_events,
    read_revisions,
)
from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.store.records import (
    OperationRecord,
    PlanSummary,
    ProposalRecord,
    RevisionKind,
    RevisionOutcome,
    RevisionRecord,
    StoredEvent,
)
from bot.store.store import Store
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationKind, OperationState

__all__ = [
    "record_agent_events",
    "record_agent_operation",
    "record_agent_plan",
    "record_agent_proposal",
    "revision_of_agent",
]

# A revision the agent ran without a plan the store saw (a config found running, or one started
# before the store was used): no figures, nothing refused.
_UNPLANNED = PlanSummary(None, None, None, Verdict.FITS, "run by the agent; no plan was recorded")


# What the agent's operation kind makes of the revision it runs.
_KIND = {
    OperationKind.RESIZE: RevisionKind.CHANGE,
    OperationKind.RESTART: RevisionKind.RESTART,
    OperationKind.ROLLBACK: RevisionKind.ROLLBACK,
    OperationKind.LIVE: RevisionKind.LIVE,
    OperationKind.RECONFIGURE: RevisionKind.CHANGE,
}


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise AgentError(f"{where} is {type(value).__name__}, not a JSON object")
    return value


def _read_plan(answer: Mapping[str, Any]) -> tuple[PlanSummary, HiCacheSetting]:
    """A ``/v1/plans`` answer (or a 422 body carrying ``plan``): the store's summary, with the
    planner's real figures and verdict, and the setting asked for."""
    plan = AgentPlan.from_json(_mapping(answer, "the agent's plan answer").get("plan"))
    return _summary(plan), plan.requested_setting


def _summary(plan: AgentPlan) -> PlanSummary:
    return PlanSummary(
        per_rank_gb=plan.per_rank_gb,
        total_gb=plan.total_gb,
        per_rank_tokens=plan.per_rank_tokens,
        verdict=plan.verdict,
        reason=plan.reason,
        detail=dict(plan.raw),
    )


def _stored(events: Sequence[AgentEvent]) -> list[StoredEvent]:
    return [StoredEvent(e.seq, e.at, e.phase, e.message, e.progress, e.data) for e in events]


def _outcome_figures(figures: StartFigures) -> dict[str, Any]:
    """The keyword arguments :meth:`Store.record_outcome` takes for a start's figures."""
    return {
        "startup_seconds": figures.startup_seconds,
        "device_tokens": figures.device_tokens,
        "host_gb_per_rank": figures.host_gb_per_rank,
        "host_tokens_per_rank": figures.host_tokens_per_rank,
    }


def record_agent_plan(
    store: Store, host: str, answer: Mapping[str, Any], *, proposed_by: str | None
) -> RevisionRecord:
    """Record a ``/v1/plans`` answer: ``refused`` with its figures, or ``proposed``."""
    plan, setting = _read_plan(answer)
    refused = plan.verdict is Verdict.REFUSED
    outcome = RevisionOutcome.REFUSED if refused else RevisionOutcome.PROPOSED
    return store.record_revision(host, setting, plan, proposed_by=proposed_by, outcome=outcome)


def record_agent_proposal(
    store: Store,
    host: str,
    answer: Mapping[str, Any],
    *,
    proposed_by: str,
    channel: str,
    expires_at: datetime,
    at: datetime | None = None,
    returned_to: int | None = None,
) -> ProposalRecord:
    """Record a ``/v1/plans`` answer shown to people as a proposal, with its ``fingerprint``:
    a refused plan ends ``refused`` at once (its figures and reason kept), a fitting one stays
    ``proposed`` until it is applied, cancelled or expires. ``returned_to`` makes it a
    rollback proposal: the store revision whose config it returns the host to."""
    plan, setting = _read_plan(answer)
    fingerprint = answer.get("fingerprint")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise AgentError(f"the agent's plan answer has no fingerprint: {fingerprint!r}")
    request = plan.detail.get("request")
    proposal = store.record_proposal(
        host,
        setting,
        plan,
        proposed_by=proposed_by,
        channel=channel,
        expires_at=expires_at,
        fingerprint=fingerprint,
        requested=dict(request) if isinstance(request, Mapping) else {},
        at=at,
        returned_to=returned_to,
    )
    if plan.verdict is Verdict.REFUSED:
        store.record_outcome(proposal.revision_id, RevisionOutcome.REFUSED, at=at)
    return proposal


def record_agent_events(
    store: Store, host: str, agent_operation_id: int, page: Mapping[str, Any]
) -> int:
    """Append the events of a ``GET /v1/operations/{id}`` page (``{"events": [...]}`` is enough)
    to the recorded operation; returns how many were new (0 for an operation not recorded)."""
    events = _stored(read_events(page))
    stored = store.operation_by_agent_id(host, agent_operation_id)
    if stored is None or not events:
        return 0
    return store.append_events(stored.id, events)


def record_agent_operation(
    store: Store,
    host: str,
    page: Mapping[str, Any],
    revisions: Mapping[str, Any],
    *,
    revision_id: int | None = None,
    channel: str | None = None,
    message_ts: str | None = None,
) -> OperationRecord:
    """Record a ``GET /v1/operations/{id}`` page with the agent's ``GET /v1/revisions`` answer.

    ``revision_id`` is the store revision the operation applies (a proposal's); without it the
    revision is found by the agent's id, or recorded as proposed and applied by the operation's
    actor. Call it with every page: events are added, and the outcome once the operation's
    final event is in (the returned record's ``finished_at`` is then set).
    """
    page = _mapping(page, "the agent's operation page")
    op, events = AgentOperation.from_json(page.get("operation")), _stored(read_events(page))
    agent_revisions = read_revisions(revisions)
    if op.revision is not None and op.revision not in agent_revisions:
        raise AgentError(
            f"the agent's revisions do not include revision {op.revision} of operation {op.id}; "
            "pass the agent's GET /v1/revisions answer from after the operation started"
        )
    history = _all_events(store, host, op.id, events)
    # The agent's state turns final with its final event; a page can show the state before the
    # event reached it. The outcome is recorded from that event, so it waits for it.
    ended = bool(history) and history[-1].phase.value == op.state.value
    end = _read_end(op, agent_revisions, history) if ended else None
    own = None
    if op.revision is not None:
        own = _own_revision(store, host, op, agent_revisions, revision_id)
    stored = store.record_operation(
        host,
        op.id,
        op.kind,
        state=op.state,
        channel=channel,
        message_ts=message_ts,
        revision_id=None if own is None else own.id,
        started_at=op.created_at,
        caller=op.caller,
    )
    store.append_events(stored.id, events)
    if end is None:
        if op.state in FINAL_OPERATION_STATES:
            return store.operation(stored.id)  # final event not here yet: the next page has it
        return store.update_operation(stored.id, state=op.state)
    if own is not None:
        _record_end(store, host, op, agent_revisions, own, end)
    return store.finish_operation(stored.id, op.state, at=op.finished_at)


@dataclass(frozen=True)
class _Rollback:
    """The agent's rollback of a failed start, from its 'rolling_back' event."""

    step: StoredEvent
    target_id: int  # the agent revision it returned to
    rollback_id: int  # the agent revision of the rollback's own start


@dataclass(frozen=True)
class _End:
    """How a final operation ended, read whole before anything is written."""

    figures: StartFigures  # what the final event logged
    final_data: Mapping[str, Any]
    rollback: _Rollback | None


def _all_events(
    store: Store, host: str, agent_operation_id: int, page: Sequence[StoredEvent]
) -> list[StoredEvent]:
    # The events stored from earlier pages, then this page's new ones: the whole operation.
    known: dict[int, StoredEvent] = {}
    existing = store.operation_by_agent_id(host, agent_operation_id)
    if existing is not None:
        known = {event.seq: event for event in store.operation_events(existing.id)}
    for event in page:
        known.setdefault(event.seq, event)
    return [known[seq] for seq in sorted(known)]


def _read_end(
    op: AgentOperation, agent_revisions: Mapping[int, AgentRevision], events: Sequence[StoredEvent]
) -> _End:
    final_data = events[-1].data if events else {}
    figures = StartFigures.from_json(final_data)
    # Whether the agent rolled back shows in its events, whatever the operation's kind: a
    # rollback a person asked for also carries ``rollback_of``, and may fail with none.
    step = next((e for e in events if e.phase is EventPhase.ROLLING_BACK), None)
    if step is None:
        if op.state is OperationState.ROLLED_BACK:
            raise AgentError(
                f"the agent's operation {op.id} ended 'rolled_back', but its events have no "
                "'rolling_back' step naming the revisions; pass every event (after=0)"
            )
        return _End(figures, final_data, None)
    target_id, rollback_id = step.data.get("target_revision"), step.data.get("revision")
    if not isinstance(target_id, int) or target_id not in agent_revisions:
        raise AgentError(
            f"the agent's rolling_back event {step.seq} returns to revision {target_id!r}, which "
            "its revisions answer does not hold"
        )
    if not isinstance(rollback_id, int) or rollback_id < 1:
        raise AgentError(
            f"the agent's rolling_back event {step.seq} names no revision of its own start "
            f"({rollback_id!r})"
        )
    return _End(figures, final_data, _Rollback(step, target_id, rollback_id))


def _own_revision(
    store: Store,
    host: str,
    op: AgentOperation,
    agent_revisions: Mapping[int, AgentRevision],
    revision_id: int | None,
) -> RevisionRecord:
    assert op.revision is not None  # the caller's check
    agent = agent_revisions[op.revision]
    if revision_id is not None:
        record = store.revision(revision_id)
    else:
        # A fleet replica's change was proposed before its agent ran it: that proposal's
        # revision is this operation's, so one start is one row, credited to its proposer.
        found = store.revision_by_agent_id(host, agent.id) or store.revision_of_rollout_operation(
            host, op.id
        )
        record = found or store.record_revision(
            host,
            agent.setting,
            _UNPLANNED if op.plan is None else _summary(op.plan),
            proposed_by=op.actor,
            at=op.created_at,
            command_line=agent.argv,
            kind=_KIND[op.kind],
        )
    if record.outcome is RevisionOutcome.PROPOSED:
        store.record_apply(record.id, op.actor, at=op.created_at)
    record = store.record_agent_revision(record.id, agent.id, agent.argv)
    undone = op.rollback_of
    proposed_rollback = op.kind is OperationKind.ROLLBACK and record.returned_to is not None
    if proposed_rollback and record.rollback_of is None and undone in agent_revisions:
        assert undone is not None  # in the mapping
        before = _ensure_revision(store, host, agent_revisions[undone])
        record = store.link_rollback(record.id, before.id)
    return record


def _record_end(
    store: Store,
    host: str,
    op: AgentOperation,
    agent_revisions: Mapping[int, AgentRevision],
    own: RevisionRecord,
    end: _End,
) -> None:
    at = op.finished_at
    if op.state is OperationState.READY:
        store.record_outcome(own.id, RevisionOutcome.READY, at=at, **_outcome_figures(end.figures))
        if own.rollback_of is not None and own.returned_to is not None:
            undone = store.revision(own.rollback_of)
            if undone.outcome is not RevisionOutcome.ROLLED_BACK:
                store.record_outcome(undone.id, RevisionOutcome.ROLLED_BACK, at=at)
        return
    if end.rollback is None:
        _record_failure(store, own, op)
        return
    rollback = _record_rollback(store, host, op, agent_revisions, own, end.rollback)
    if op.state is OperationState.ROLLED_BACK:
        store.record_outcome(
            rollback.id, RevisionOutcome.READY, at=at, **_outcome_figures(end.figures)
        )
    else:
        # The rollback's own start failed too: the final event's data holds its failure.
        store.record_outcome(
            rollback.id,
            RevisionOutcome.FAILED,
            at=at,
            failure_kind=end.final_data.get("kind"),
            failure_lines=end.final_data.get("lines") or (),
        )


def _record_failure(store: Store, own: RevisionRecord, op: AgentOperation) -> None:
    if store.revision(own.id).outcome is not RevisionOutcome.APPLIED:
        return  # already recorded (failed, or rolled back since)
    failure = op.failure
    if failure is None:
        store.record_outcome(own.id, RevisionOutcome.FAILED, at=op.finished_at)
        return
    store.record_outcome(
        own.id,
        RevisionOutcome.FAILED,
        at=op.finished_at,
        failure_kind=failure.kind,
        failure_lines=failure.lines,
        **_outcome_figures(failure.figures),
    )


def _record_rollback(
    store: Store,
    host: str,
    op: AgentOperation,
    agent_revisions: Mapping[int, AgentRevision],
    own: RevisionRecord,
    rollback: _Rollback,
) -> RevisionRecord:
    existing = store.revision_by_agent_id(host, rollback.rollback_id)
    if existing is not None and existing.rollback_of == own.id:
        return existing
    _record_failure(store, own, op)
    target = _ensure_revision(store, host, agent_revisions[rollback.target_id])
    return store.record_rollback(
        own.id, target.id, at=rollback.step.at, agent_revision_id=rollback.rollback_id
    )


def revision_of_agent(
    store: Store, host: str, revisions: Mapping[str, Any], agent_revision_id: int
) -> RevisionRecord:
    """The store's revision standing for the host agent's revision ``agent_revision_id``, from
    the agent's ``GET /v1/revisions`` answer: the one recorded, or recorded now as it ran."""
    agent_revisions = read_revisions(revisions)
    if agent_revision_id not in agent_revisions:
        raise AgentError(
            f"the agent of {host} lists no revision {agent_revision_id} in its revisions answer"
        )
    return _ensure_revision(store, host, agent_revisions[agent_revision_id])


def _ensure_revision(store: Store, host: str, agent: AgentRevision) -> RevisionRecord:
    """The store's revision for an agent revision recorded before the store saw it (the config a
    rollback returns to may have been started without the store): recorded as it ran."""
    found = store.revision_by_agent_id(host, agent.id)
    if found is not None:
        return found
    record = store.record_revision(
        host,
        agent.setting,
        _UNPLANNED,
        proposed_by=None,
        at=agent.created_at,
        command_line=agent.argv,
    )
    store.record_apply(record.id, agent.actor, at=agent.created_at)
    store.record_agent_revision(record.id, agent.id, agent.argv)
    if agent.became_ready:
        figures = _outcome_figures(agent.figures)
        return store.record_outcome(
            record.id, RevisionOutcome.READY, at=agent.finished_at, **figures
        )
    return store.revision(record.id)
