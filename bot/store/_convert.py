"""Rows to records: the only place ORM objects turn into the frozen values callers see."""

from __future__ import annotations

from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.store._models import (
    CapacitySampleRow,
    OperationEventRow,
    OperationRow,
    ProposalRow,
    RefusalRow,
    ReportScheduleRow,
    RevisionRow,
)
from bot.store.records import (
    CapacitySample,
    OperationRecord,
    PlanSummary,
    ProposalRecord,
    RefusalRecord,
    ReportSchedule,
    RevisionKind,
    RevisionOutcome,
    RevisionRecord,
    StoredEvent,
)
from bot.vocab import EventPhase, FailureKind, OperationKind, OperationState

__all__ = [
    "event_record",
    "operation_record",
    "proposal_record",
    "refusal_record",
    "revision_record",
    "sample_record",
    "schedule_record",
]


def revision_record(row: RevisionRow) -> RevisionRecord:
    return RevisionRecord(
        id=row.id,
        host=row.host,
        settings=HiCacheSetting(
            enabled=row.hicache_enabled,
            ratio=row.hicache_ratio,
            size_gb=row.hicache_size_gb,
            write_policy=row.hicache_write_policy,
            io_backend=row.hicache_io_backend,
        ),
        command_line=tuple(row.command_line),
        plan=PlanSummary(
            per_rank_gb=row.plan_per_rank_gb,
            total_gb=row.plan_total_gb,
            per_rank_tokens=row.plan_per_rank_tokens,
            verdict=Verdict(row.plan_verdict),
            reason=row.plan_reason,
            detail=row.plan,
        ),
        proposed_by=row.proposed_by,
        applied_by=row.applied_by,
        proposed_at=row.proposed_at,
        applied_at=row.applied_at,
        finished_at=row.finished_at,
        outcome=RevisionOutcome(row.outcome),
        startup_seconds=row.startup_seconds,
        device_tokens=row.device_tokens,
        host_gb_per_rank=row.host_gb_per_rank,
        host_tokens_per_rank=row.host_tokens_per_rank,
        failure_kind=None if row.failure_kind is None else FailureKind(row.failure_kind),
        failure_lines=tuple(row.failure_lines),
        rollback_of=row.rollback_of,
        returned_to=row.returned_to,
        agent_revision_id=row.agent_revision_id,
        agent_returned_to=row.agent_returned_to,
        kind=RevisionKind(row.kind),
    )


def proposal_record(row: ProposalRow) -> ProposalRecord:
    return ProposalRecord(
        id=row.id,
        revision_id=row.revision_id,
        channel=row.channel,
        message_ts=row.message_ts,
        expires_at=row.expires_at,
        fingerprint=row.fingerprint,
        requested=row.requested,
        created_at=row.created_at,
    )


def operation_record(row: OperationRow) -> OperationRecord:
    return OperationRecord(
        id=row.id,
        agent_operation_id=row.agent_operation_id,
        host=row.host,
        kind=OperationKind(row.kind),
        state=OperationState(row.state),
        channel=row.channel,
        message_ts=row.message_ts,
        revision_id=row.revision_id,
        last_event_seq=row.last_event_seq,
        started_at=row.started_at,
        finished_at=row.finished_at,
        caller=row.caller,
    )


def event_record(row: OperationEventRow) -> StoredEvent:
    return StoredEvent(
        seq=row.seq,
        at=row.at,
        phase=EventPhase(row.phase),
        message=row.message,
        progress=row.progress,
        data=row.data,
    )


def refusal_record(row: RefusalRow) -> RefusalRecord:
    return RefusalRecord(
        id=row.id,
        at=row.at,
        user_id=row.user_id,
        action=row.action,
        reason=row.reason,
        host=row.host,
        channel=row.channel,
        revision_id=row.revision_id,
    )


def sample_record(row: CapacitySampleRow) -> CapacitySample:
    return CapacitySample(
        host=row.host,
        at=row.at,
        ram_total_bytes=row.ram_total_bytes,
        ram_available_bytes=row.ram_available_bytes,
        hicache_host_bytes=row.hicache_host_bytes,
        device_tokens=row.device_tokens,
        host_tokens=row.host_tokens,
        token_usage=row.token_usage,
        queued_requests=row.queued_requests,
        running_requests=row.running_requests,
        cache_hit_rate=row.cache_hit_rate,
        gpus=tuple(row.gpus),
    )


def schedule_record(row: ReportScheduleRow) -> ReportSchedule:
    return ReportSchedule(
        id=row.id,
        channel=row.channel,
        host=row.host,
        cadence=row.cadence,
        next_run_at=row.next_run_at,
        created_by=row.created_by,
        created_at=row.created_at,
        enabled=row.enabled,
    )
