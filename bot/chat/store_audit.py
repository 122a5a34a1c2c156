"""The core's audit over :class:`bot.store.Store` as it is today.

A proposal is a revision plus a proposal row; an operation is an operation row with its events;
an outcome lands on the revision (failed, then rolled back, for a rollback).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

from bot.chat.agent_views import AgentEvent, AgentOperation, PlannedChange
from bot.chat.audit import HistoryEntry, Watch
from bot.chat.policy import ProposalState, ProposalTerms, Refusal
from bot.chat.progress import ProgressView, progress_view
from bot.errors import InputError, NotFound, StoreError
from bot.store import (
    HiCacheSettings,
    OperationEvent,
    Outcome,
    PlanSummary,
    ProposalRecord,
    RevisionRecord,
    Store,
)
from bot.vocab import OperationState

__all__ = ["StoreAudit"]

_OPEN = {Outcome.PROPOSED.value, Outcome.REFUSED.value}


class StoreAudit:
    """:class:`Audit` over :class:`bot.store.Store` as it is today."""

    def __init__(self, store: Store) -> None:
        self.store = store
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
    ) -> ProposalTerms:
        plan = change.plan
        settings = HiCacheSettings(
            enabled=True,
            ratio=plan.ratio,
            size_gb=None if plan.size_gb is None else int(plan.size_gb),
        )
        summary = PlanSummary(
            per_rank_gb=plan.per_rank_gb or 0.0,
            total_gb=plan.total_gb or 0.0,
            per_rank_tokens=plan.per_rank_tokens or 0,
            verdict="fits" if plan.fits else "refused",
            reason=plan.reason,
            detail=dict(plan.raw),
        )
        requested = {"ratio": plan.ratio, "size_gb": plan.size_gb}
        record = self.store.record_proposal(
            host,
            settings,
            summary,
            proposed_by=proposed_by,
            channel=channel,
            expires_at=expires_at,
            fingerprint=change.fingerprint,
            requested=requested,
            at=at,
        )
        if not plan.fits:
            self.store.record_outcome(record.revision_id, Outcome.REFUSED, at=at)
        return self.proposal(record.id)

    def proposal(self, proposal_id: int) -> ProposalTerms:
        try:
            record = self.store.proposal(proposal_id)
        except (NotFound, InputError) as exc:
            raise NotFound(f"there is no proposal #{proposal_id}") from exc
        return _terms(record, self.store.revision(record.revision_id))

    def claim_apply(self, proposal_id: int, actor: str, at: datetime) -> ProposalTerms:
        with self._claims:
            record = self.store.proposal(proposal_id)
            revision = self.store.revision(record.revision_id)
            if revision.outcome.value == Outcome.PROPOSED.value:
                try:
                    revision = self.store.record_apply(revision.id, actor, at=at)
                except (StoreError, InputError):
                    # Another process claimed it between the read and the write: read who did.
                    revision = self.store.revision(record.revision_id)
            return _terms(record, revision)

    def settle_refused(self, proposal_id: int) -> None:
        """The agent refused the claimed proposal at apply time: it ends refused."""
        record = self.store.proposal(proposal_id)
        self.store.record_outcome(record.revision_id, Outcome.REFUSED)

    def settle_expired(self, proposal_id: int) -> None:
        """An apply found the proposal expired or void: record it so (once)."""
        record = self.store.proposal(proposal_id)
        if self.store.revision(record.revision_id).outcome.value == Outcome.PROPOSED.value:
            self.store.record_outcome(record.revision_id, Outcome.EXPIRED)

    def cancel(self, proposal_id: int, actor: str, at: datetime) -> ProposalTerms:
        record = self.store.proposal(proposal_id)
        revision = self.store.revision(record.revision_id)
        if revision.outcome.value == Outcome.PROPOSED.value:
            revision = self.store.record_outcome(revision.id, Outcome.CANCELLED, at=at)
        return _terms(record, revision)

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
        revision_id = None
        if proposal_id is not None:
            revision_id = self.store.proposal(proposal_id).revision_id
        self.store.record_operation(
            watch.host,
            str(operation.id),
            operation.kind.value,
            state=operation.state.value,
            channel=channel,
            revision_id=revision_id,
            started_at=operation.created_at,
        )

    def record_events(self, watch: Watch, events: Sequence[AgentEvent]) -> None:
        record = self.store.operation_by_agent_id(watch.host, str(watch.operation_id))
        if record is None or not events:
            return
        self.store.append_events(
            record.id,
            [
                OperationEvent(
                    seq=event.seq,
                    at=event.at,
                    phase=event.phase.value,
                    message=event.message,
                    progress=event.progress,
                    data=dict(event.data),
                )
                for event in events
            ],
        )

    def finish(self, watch: Watch, operation: AgentOperation, view: ProgressView) -> None:
        record = self.store.operation_by_agent_id(watch.host, str(watch.operation_id))
        if record is None or record.finished_at is not None:
            return  # unknown, or already recorded by an earlier watcher
        self.store.finish_operation(record.id, operation.state.value, at=operation.finished_at)
        if record.revision_id is not None:
            self._outcome(record.revision_id, operation, view)

    def _outcome(self, revision_id: int, operation: AgentOperation, view: ProgressView) -> None:
        at = operation.finished_at
        if operation.state is OperationState.READY and view.final is not None:
            final = view.final
            self.store.record_outcome(
                revision_id,
                Outcome.READY,
                at=at,
                startup_seconds=final.startup_s,
                device_tokens=final.device_tokens,
                host_gb_per_rank=final.host_gb_per_rank,
                host_tokens_per_rank=final.host_tokens_per_rank,
            )
            return
        cause = view.rollback or view.failure
        self.store.record_outcome(
            revision_id,
            Outcome.FAILED,
            at=at,
            failure_kind=None if cause is None else cause.kind.value,
            failure_lines=() if cause is None else cause.lines,
        )
        if operation.state is OperationState.ROLLED_BACK:
            self.store.record_outcome(revision_id, Outcome.ROLLED_BACK, at=at)

    def unfinished(self) -> list[Watch]:
        watches = []
        for record in self.store.unfinished_operations():
            watches.append(
                Watch(
                    host=record.host,
                    operation_id=int(record.agent_operation_id),
                    title=f"{record.kind} {record.host}",
                    proposed_by=None,
                    applied_by=None,
                    last_seq=record.last_event_seq,
                )
            )
        return watches

    def known(self, host: str, operation_id: int) -> bool:
        return self.store.operation_by_agent_id(host, str(operation_id)) is not None

    def import_operation(
        self, host: str, operation: AgentOperation, events: Sequence[AgentEvent]
    ) -> Watch:
        """Record an operation someone started without this bot (another bot, curl), so
        ``history`` is complete: a revision applied by its actor, the operation, its events and,
        once it has ended, its outcome."""
        plan = operation.plan
        settings = HiCacheSettings(
            enabled=True,
            ratio=None if plan is None else plan.ratio,
            size_gb=None if plan is None or plan.size_gb is None else int(plan.size_gb),
        )
        summary = PlanSummary(
            per_rank_gb=(plan.per_rank_gb if plan else None) or 0.0,
            total_gb=(plan.total_gb if plan else None) or 0.0,
            per_rank_tokens=(plan.per_rank_tokens if plan else None) or 0,
            verdict="fits",
            reason=plan.reason if plan else f"{operation.kind} started outside kimi-ops chat",
            detail={} if plan is None else dict(plan.raw),
        )
        revision = self.store.record_revision(
            host, settings, summary, proposed_by=operation.actor, at=operation.created_at
        )
        self.store.record_apply(revision.id, operation.actor, at=operation.created_at)
        self.store.record_operation(
            host,
            str(operation.id),
            operation.kind.value,
            state=operation.state.value,
            revision_id=revision.id,
            started_at=operation.created_at,
        )
        watch = Watch(
            host=host,
            operation_id=operation.id,
            title=f"{operation.kind.value.capitalize()} {host} (by {operation.actor})",
            proposed_by=None,
            applied_by=operation.actor,
            planned_gb_per_rank=None if plan is None else plan.per_rank_gb,
        )
        self.record_events(watch, events)
        if operation.finished:
            view = progress_view(
                events,
                operation.state,
                planned_gb_per_rank=watch.planned_gb_per_rank,
                failure=operation.failure,
            )
            self.finish(watch, operation, view)
        return watch

    def history(self, host: str | None, limit: int) -> list[HistoryEntry]:
        return [_entry(record) for record in self.store.history(host, limit)]


def _terms(record: ProposalRecord, revision: RevisionRecord) -> ProposalTerms:
    outcome = revision.outcome.value
    if outcome in _OPEN:
        state, by, at = ProposalState.OPEN, None, None
    elif outcome == Outcome.CANCELLED.value:
        state, by, at = ProposalState.CANCELLED, revision.applied_by, revision.finished_at
    elif outcome == Outcome.EXPIRED.value:
        state, by, at = ProposalState.EXPIRED, None, revision.finished_at
    else:
        state, by, at = ProposalState.APPLIED, revision.applied_by, revision.applied_at
    return ProposalTerms(
        id=record.id,
        host=revision.host,
        proposed_by=revision.proposed_by or "",
        created_at=record.created_at,
        fits=revision.plan.verdict == "fits" and outcome != Outcome.REFUSED.value,
        reason=revision.plan.reason,
        state=state,
        settled_by=by,
        settled_at=at,
        ratio=revision.settings.ratio,
        size_gb=revision.settings.size_gb,
        fingerprint=record.fingerprint,
    )


def _entry(record: RevisionRecord) -> HistoryEntry:
    settings = record.settings
    setting = (
        f"size {settings.size_gb} GB/rank"
        if settings.size_gb
        else f"ratio {settings.ratio:g}"
        if settings.ratio is not None
        else "(as configured)"
    )
    return HistoryEntry(
        id=record.id,
        host=record.host,
        setting=setting,
        proposed_by=record.proposed_by,
        applied_by=record.applied_by,
        proposed_at=record.proposed_at,
        outcome=record.outcome.value,
        planned_gb_per_rank=record.plan.per_rank_gb or None,
        logged_gb_per_rank=record.host_gb_per_rank,
        startup_s=record.startup_seconds,
        device_tokens=record.device_tokens,
        failure_kind=record.failure_kind,
    )
