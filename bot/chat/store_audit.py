"""The core's audit over :class:`bot.store.Store`, through the store's one agent mapping.

What an agent answered (a plan, an operation page, its events) is recorded by
:mod:`bot.store.from_agent`, as the demo and any importer record it; this module adds only what
the bot itself decides: claims, cancels, expiries and refusals. An operation's revision carries
the command line the agent wrote, so ``revisions`` (host -> the agent's ``GET /v1/revisions``
answer) is asked whenever an operation is recorded or ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from bot.agent_json import AgentEvent, AgentOperation, PlannedChange
from bot.chat.audit import HistoryEntry, RollbackTarget, Watch
from bot.chat.policy import ProposalState, ProposalTerms, Refusal
from bot.chat.progress import ProgressView
from bot.errors import InputError, NotFound, StoreError
from bot.planner import Verdict
from bot.store import (
    OperationRecord,
    ProposalRecord,
    RevisionOutcome,
    RevisionRecord,
    Store,
    read_revisions,
    record_agent_events,
    record_agent_operation,
    record_agent_proposal,
    revision_of_agent,
)
from bot.vocab import OperationKind

__all__ = ["RevisionsSource", "StoreAudit"]

#: host -> the agent's ``GET /v1/revisions`` answer, as sent.
RevisionsSource = Callable[[str], Mapping[str, Any]]

_OPEN = {RevisionOutcome.PROPOSED, RevisionOutcome.REFUSED}


class StoreAudit:
    """:class:`~bot.chat.audit.Audit` over :class:`bot.store.Store`."""

    def __init__(self, store: Store, revisions: RevisionsSource) -> None:
        self.store = store
        self._revisions = revisions
        # One bot process applies from several threads (Slack's listener pool, the terminal):
        # the store's transaction makes the claim atomic across processes, this lock within one.
        self._claims = threading.Lock()

    # -- proposals ---------------------------------------------------------------------------

    def record_proposal(
        self,
        host: str,
        proposed_by: str,
        change: PlannedChange,
        at: datetime,
        expires_at: datetime,
        channel: str,
        returns_to: int | None = None,
    ) -> ProposalTerms:
        answer = {"plan": change.plan.raw, "fingerprint": change.fingerprint}
        record = record_agent_proposal(
            self.store,
            host,
            answer,
            proposed_by=proposed_by,
            channel=channel,
            expires_at=expires_at,
            at=at,
            returned_to=returns_to,
        )
        return self.proposal(record.id)

    def _terms(self, record: ProposalRecord, revision: RevisionRecord) -> ProposalTerms:
        agent_revision = None
        if revision.returned_to is not None:
            agent_revision = self.store.revision(revision.returned_to).agent_revision_id
        return _terms(record, revision, agent_revision)

    def rollback_target(self, host: str | None, revision: int | None) -> RollbackTarget:
        if revision is None:
            if host is None:
                raise InputError("name the host to roll back, or a revision from history")
            record = self._last_other_ready(host)
        else:
            try:
                record = self.store.revision(revision)
            except (NotFound, InputError) as exc:
                raise NotFound(
                    f"there is no revision {revision} in the history; 'history' lists them"
                ) from exc
            if host is not None and record.host != host:
                raise InputError(
                    f"revision {record.id} is {record.host}'s ({_setting(record)}), not {host}'s; "
                    f"'history {host}' lists {host}'s revisions"
                )
        if record.agent_revision_id is None or not _became_ready(record):
            raise InputError(
                f"revision {record.id} of {record.host} ({_setting(record)}) never became ready "
                f"there (it is {record.outcome.value}); a rollback returns to a config that ran"
            )
        return RollbackTarget(
            revision=record.id,
            host=record.host,
            agent_revision=record.agent_revision_id,
            setting=record.settings,
            applied_by=record.applied_by,
            applied_at=record.applied_at or record.proposed_at,
        )

    def _last_other_ready(self, host: str) -> RevisionRecord:
        """The agent's own rule (the newest revision that became ready, other than the running
        one and any with its command line), read from its revisions, as the audit's revision."""
        answer = self._revisions(host)
        newest = sorted(read_revisions(answer).values(), key=lambda r: r.id, reverse=True)
        for candidate in newest[1:]:
            if candidate.became_ready and candidate.argv != newest[0].argv:
                return revision_of_agent(self.store, host, answer, candidate.id)
        raise NotFound(
            f"{host} has no earlier config that became ready to roll back to; "
            "'history' lists its revisions"
        )

    def proposal(self, proposal_id: int) -> ProposalTerms:
        try:
            record = self.store.proposal(proposal_id)
        except (NotFound, InputError) as exc:
            raise NotFound(f"there is no proposal #{proposal_id}") from exc
        return self._terms(record, self.store.revision(record.revision_id))

    def claim_apply(self, proposal_id: int, actor: str, at: datetime) -> ProposalTerms:
        with self._claims:
            record = self.store.proposal(proposal_id)
            revision = self.store.revision(record.revision_id)
            if revision.outcome is RevisionOutcome.PROPOSED:
                try:
                    revision = self.store.record_apply(revision.id, actor, at=at)
                except (StoreError, InputError):
                    # Another process claimed it between the read and the write: read who did.
                    revision = self.store.revision(record.revision_id)
            return self._terms(record, revision)

    def settle_refused(self, proposal_id: int) -> None:
        """The agent refused the claimed proposal at apply time: it ends refused."""
        record = self.store.proposal(proposal_id)
        self.store.record_outcome(record.revision_id, RevisionOutcome.REFUSED)

    def settle_expired(self, proposal_id: int) -> None:
        """An apply found the proposal expired or void: record it so (once)."""
        record = self.store.proposal(proposal_id)
        if self.store.revision(record.revision_id).outcome is RevisionOutcome.PROPOSED:
            self.store.record_outcome(record.revision_id, RevisionOutcome.EXPIRED)

    def cancel(self, proposal_id: int, actor: str, at: datetime) -> ProposalTerms:
        record = self.store.proposal(proposal_id)
        revision = self.store.revision(record.revision_id)
        if revision.outcome is RevisionOutcome.PROPOSED:
            revision = self.store.record_outcome(revision.id, RevisionOutcome.CANCELLED, at=at)
        return self._terms(record, revision)

    def record_refusal(self, refusal: Refusal, text: str, at: datetime, channel: str) -> None:
        revision_id = None
        if refusal.proposal_id is not None:
            revision_id = self.store.proposal(refusal.proposal_id).revision_id
        self.store.record_refusal(
            refusal.actor,
            refusal.action.value,
            f"{refusal.kind.value}: {text}",
            host=refusal.host,
            channel=channel,
            revision_id=revision_id,
            at=at,
        )

    # -- operations --------------------------------------------------------------------------

    def record_operation(
        self, watch: Watch, operation: AgentOperation, proposal_id: int | None, channel: str
    ) -> None:
        revision_id, message_ts = None, None
        if proposal_id is not None:
            # The proposal's message becomes the operation's: its progress edits that message.
            proposal = self.store.proposal(proposal_id)
            revision_id, message_ts = proposal.revision_id, proposal.message_ts
            if message_ts is not None:
                channel = proposal.channel
        self._record(
            watch.host,
            operation,
            (),
            revision_id=revision_id,
            channel=channel,
            message_ts=message_ts,
        )

    def record_events(self, watch: Watch, events: Sequence[AgentEvent]) -> None:
        page = {"events": [event.to_json() for event in events]}
        record_agent_events(self.store, watch.host, watch.operation_id, page)

    def finish(self, watch: Watch, operation: AgentOperation, view: ProgressView) -> None:
        record = self.store.operation_by_agent_id(watch.host, watch.operation_id)
        if record is None or record.finished_at is not None:
            return  # unknown, or already recorded by an earlier watcher
        # The events are stored already: the mapping reads the outcome from the final one.
        self._record(watch.host, operation, ())

    def _record(
        self,
        host: str,
        operation: AgentOperation,
        events: Sequence[AgentEvent],
        *,
        revision_id: int | None = None,
        channel: str | None = None,
        message_ts: str | None = None,
    ) -> None:
        page = {"operation": operation.raw, "events": [event.to_json() for event in events]}
        revisions = {"revisions": []} if operation.revision is None else self._revisions(host)
        record_agent_operation(
            self.store,
            host,
            page,
            revisions,
            revision_id=revision_id,
            channel=channel,
            message_ts=message_ts,
        )

    def unfinished(self) -> list[Watch]:
        return [self._resumed(record) for record in self.store.unfinished_operations()]

    def applied_unstarted(self) -> list[ProposalTerms]:
        """Proposals claimed by an apply whose operation was never recorded: the bot stopped
        between the claim and recording what the agent answered."""
        return [
            self._terms(record, self.store.revision(record.revision_id))
            for record in self.store.applied_without_operation()
        ]

    def _resumed(self, record: OperationRecord) -> Watch:
        """The watch a restarted bot takes up again, with who proposed and applied it, so its
        notices mention the same people as before the restart."""
        title = f"{record.kind.value.capitalize()} {record.host}"
        proposed_by = applied_by = planned = None
        if record.revision_id is not None:
            revision = self.store.revision(record.revision_id)
            proposed_by, applied_by = revision.proposed_by, revision.applied_by
            planned = revision.plan.per_rank_gb
            setting = revision.plan.detail.get("setting")
            if record.kind is OperationKind.RESIZE and setting:
                title = f"Resize {record.host}: hicache {setting}"
        return Watch(
            host=record.host,
            operation_id=record.agent_operation_id,
            title=title,
            proposed_by=proposed_by,
            applied_by=applied_by,
            last_seq=record.last_event_seq,
            planned_gb_per_rank=planned,
        )

    def known(self, host: str, operation_id: int) -> bool:
        return self.store.operation_by_agent_id(host, operation_id) is not None

    def import_operation(
        self, host: str, operation: AgentOperation, events: Sequence[AgentEvent]
    ) -> Watch:
        """Record an operation someone started without this bot (another bot, curl), so
        ``history`` is complete: its revision applied by its actor, the operation, its events
        and, once it has ended, its outcome."""
        self._record(host, operation, events)
        plan = operation.plan
        return Watch(
            host=host,
            operation_id=operation.id,
            title=f"{operation.kind.value.capitalize()} {host} (by {operation.actor})",
            proposed_by=None,
            applied_by=operation.actor,
            last_seq=events[-1].seq if events else 0,
            planned_gb_per_rank=None if plan is None else plan.per_rank_gb,
        )

    def history(self, host: str | None, limit: int) -> list[HistoryEntry]:
        return [_entry(record) for record in self.store.history(host, limit)]


def _terms(
    record: ProposalRecord, revision: RevisionRecord, agent_revision: int | None
) -> ProposalTerms:
    outcome = revision.outcome
    if outcome in _OPEN:
        state, by, at = ProposalState.OPEN, None, None
    elif outcome is RevisionOutcome.CANCELLED:
        state, by, at = ProposalState.CANCELLED, revision.applied_by, revision.finished_at
    elif outcome is RevisionOutcome.EXPIRED:
        state, by, at = ProposalState.EXPIRED, None, revision.finished_at
    else:
        state, by, at = ProposalState.APPLIED, revision.applied_by, revision.applied_at
    return ProposalTerms(
        id=record.id,
        host=revision.host,
        proposed_by=revision.proposed_by or "",
        created_at=record.created_at,
        fits=revision.plan.verdict is Verdict.FITS and outcome is not RevisionOutcome.REFUSED,
        reason=revision.plan.reason,
        state=state,
        settled_by=by,
        settled_at=at,
        ratio=revision.settings.ratio,
        size_gb=revision.settings.size_gb,
        fingerprint=record.fingerprint,
        returns_to=revision.returned_to,
        agent_revision=agent_revision,
    )


def _setting(record: RevisionRecord) -> str:
    settings = record.settings
    if not settings.enabled:
        return "hicache off"
    if settings.size_gb:
        return f"size {settings.size_gb} GB/rank"
    if settings.ratio is not None:
        return f"ratio {settings.ratio:g}"
    return "(as configured)"


def _became_ready(record: RevisionRecord) -> bool:
    # A rolled back revision either ran (undone later) or failed (its failure kept).
    if record.outcome is RevisionOutcome.READY:
        return True
    return (
        record.outcome is RevisionOutcome.ROLLED_BACK
        and record.startup_seconds is not None
        and record.failure_kind is None
    )


def _entry(record: RevisionRecord) -> HistoryEntry:
    setting = _setting(record)
    return HistoryEntry(
        id=record.id,
        host=record.host,
        setting=setting,
        proposed_by=record.proposed_by,
        applied_by=record.applied_by,
        proposed_at=record.proposed_at,
        outcome=record.outcome.value,
        planned_gb_per_rank=record.plan.per_rank_gb,
        logged_gb_per_rank=record.host_gb_per_rank,
        startup_s=record.startup_seconds,
        device_tokens=record.device_tokens,
        failure_kind=record.failure_kind,
        kind=record.kind.value,
        returned_to=record.returned_to,
    )
