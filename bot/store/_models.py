"""The tables, as SQLAlchemy 2 typed models. Migrations create them; nothing calls ``create_all``.

ON DELETE, chosen per reference:

- operation_events -> operations: CASCADE (events mean nothing without their operation);
- proposals -> revisions: CASCADE (a proposal is the Slack side of its revision);
- proposal_replicas -> proposals, revisions: CASCADE (a fleet proposal's link to each replica);
- operations -> revisions, revisions -> revisions (rollback_of, returned_to): RESTRICT, so an
  audited revision cannot vanish while anything points at it;
- refusals -> revisions: SET NULL (the refusal itself stays on record).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from bot.store._types import UTCDateTime
from bot.store.records import RevisionKind, RevisionOutcome
from bot.vocab import ReplicaPhase, RolloutState

__all__ = [
    "NAMING_CONVENTION",
    "Base",
    "CapacitySampleRow",
    "OperationEventRow",
    "OperationRow",
    "ProposalReplicaRow",
    "ProposalRow",
    "RefusalRow",
    "ReportScheduleRow",
    "RevisionRow",
    "RolloutReplicaRow",
    "RolloutRow",
    "SchedulerLockRow",
]

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

HOST = 255
USER = 64
CHANNEL = 64
TS = 32
_OUTCOMES = ", ".join(f"'{o.value}'" for o in RevisionOutcome)
_KINDS = ", ".join(f"'{k.value}'" for k in RevisionKind)
_ROLLOUT_STATES = ", ".join(f"'{s.value}'" for s in RolloutState)
_REPLICA_PHASES = ", ".join(f"'{p.value}'" for p in ReplicaPhase)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class RevisionRow(Base):
    __tablename__ = "revisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(HOST))
    hicache_enabled: Mapped[bool] = mapped_column(Boolean)
    hicache_ratio: Mapped[float | None] = mapped_column(Double)
    hicache_size_gb: Mapped[int | None] = mapped_column(Integer)
    hicache_write_policy: Mapped[str | None] = mapped_column(String(64))
    hicache_io_backend: Mapped[str | None] = mapped_column(String(64))
    command_line: Mapped[list[str]] = mapped_column(JSON)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    # None where the planner could not work a figure out (never 0).
    plan_per_rank_gb: Mapped[float | None] = mapped_column(Double)
    plan_total_gb: Mapped[float | None] = mapped_column(Double)
    plan_per_rank_tokens: Mapped[int | None] = mapped_column(BigInteger)
    plan_verdict: Mapped[str] = mapped_column(String(32))
    plan_reason: Mapped[str] = mapped_column(Text)
    proposed_by: Mapped[str | None] = mapped_column(String(USER))
    applied_by: Mapped[str | None] = mapped_column(String(USER))
    proposed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    applied_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    outcome: Mapped[str] = mapped_column(String(16))
    startup_seconds: Mapped[float | None] = mapped_column(Double)
    device_tokens: Mapped[int | None] = mapped_column(BigInteger)
    host_gb_per_rank: Mapped[float | None] = mapped_column(Double)
    host_tokens_per_rank: Mapped[int | None] = mapped_column(BigInteger)
    failure_kind: Mapped[str | None] = mapped_column(String(64))
    failure_lines: Mapped[list[str]] = mapped_column(JSON)
    rollback_of: Mapped[int | None] = mapped_column(ForeignKey("revisions.id", ondelete="RESTRICT"))
    returned_to: Mapped[int | None] = mapped_column(ForeignKey("revisions.id", ondelete="RESTRICT"))
    # The host agent's own revision ids: this one, and for a rollback the one it returned to.
    agent_revision_id: Mapped[int | None] = mapped_column(BigInteger)
    agent_returned_to: Mapped[int | None] = mapped_column(BigInteger)
    # change, restart or rollback (migration 0007).
    kind: Mapped[str] = mapped_column(
        String(16), default=RevisionKind.CHANGE.value, server_default=RevisionKind.CHANGE.value
    )

    __table_args__ = (
        CheckConstraint(f"outcome IN ({_OUTCOMES})", name="outcome"),
        CheckConstraint(f"kind IN ({_KINDS})", name="kind"),
        # revision_by_agent_id(host, id): the store's row for an agent's revision.
        Index("ix_revisions_host_agent_revision_id", "host", "agent_revision_id"),
        # history(host, limit): newest first per host.
        Index("ix_revisions_host_proposed_at", "host", "proposed_at"),
        # history(None, limit): newest first over every host, read backwards (migration 0006).
        Index("ix_revisions_proposed_at_id", "proposed_at", "id"),
        # last_ready_revision(host), startup_durations(host).
        Index("ix_revisions_host_outcome_finished_at", "host", "outcome", "finished_at"),
        Index("ix_revisions_rollback_of", "rollback_of"),
        Index("ix_revisions_returned_to", "returned_to"),
    )


class ProposalRow(Base):
    __tablename__ = "proposals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision_id: Mapped[int] = mapped_column(
        ForeignKey("revisions.id", ondelete="CASCADE"), unique=True
    )
    channel: Mapped[str] = mapped_column(String(CHANNEL))
    message_ts: Mapped[str | None] = mapped_column(String(TS))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    fingerprint: Mapped[str] = mapped_column(String(128))
    requested: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        # A button click names the message it sits on.
        Index("ix_proposals_channel_message_ts", "channel", "message_ts"),
    )


class ProposalReplicaRow(Base):
    """One replica's revision of a proposal over a whole fleet (migration 0007)."""

    __tablename__ = "proposal_replicas"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    proposal_id: Mapped[int] = mapped_column(ForeignKey("proposals.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(HOST))
    revision_id: Mapped[int] = mapped_column(
        ForeignKey("revisions.id", ondelete="CASCADE"), unique=True
    )

    __table_args__ = (UniqueConstraint("proposal_id", "host"),)


class OperationRow(Base):
    __tablename__ = "operations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent_operation_id: Mapped[int] = mapped_column(BigInteger)
    host: Mapped[str] = mapped_column(String(HOST))
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(32))
    channel: Mapped[str | None] = mapped_column(String(CHANNEL))
    message_ts: Mapped[str | None] = mapped_column(String(TS))
    revision_id: Mapped[int | None] = mapped_column(ForeignKey("revisions.id", ondelete="RESTRICT"))
    last_event_seq: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The name of the agent token that started it (migration 0003); None when unnamed.
    caller: Mapped[str | None] = mapped_column(String(USER))

    __table_args__ = (
        UniqueConstraint("host", "agent_operation_id"),
        CheckConstraint("last_event_seq >= 0", name="last_event_seq"),
        # unfinished_operations(): the rows with no finished_at.
        Index("ix_operations_finished_at", "finished_at"),
        Index("ix_operations_revision_id", "revision_id"),
        Index("ix_operations_host_started_at", "host", "started_at"),
    )


class OperationEventRow(Base):
    __tablename__ = "operation_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    operation_id: Mapped[int] = mapped_column(ForeignKey("operations.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    phase: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    progress: Mapped[float | None] = mapped_column(Double)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (
        # A replayed batch must not duplicate events; also the index for reading them in order.
        UniqueConstraint("operation_id", "seq"),
        CheckConstraint("seq >= 1", name="seq"),
    )


class RefusalRow(Base):
    __tablename__ = "refusals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    user_id: Mapped[str] = mapped_column(String(USER))
    action: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(HOST))
    channel: Mapped[str | None] = mapped_column(String(CHANNEL))
    revision_id: Mapped[int | None] = mapped_column(ForeignKey("revisions.id", ondelete="SET NULL"))

    __table_args__ = (
        Index("ix_refusals_at", "at"),
        Index("ix_refusals_user_id_at", "user_id", "at"),
        Index("ix_refusals_revision_id", "revision_id"),
    )


class CapacitySampleRow(Base):
    __tablename__ = "capacity_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(HOST))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    ram_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    ram_available_bytes: Mapped[int | None] = mapped_column(BigInteger)
    hicache_host_bytes: Mapped[int | None] = mapped_column(BigInteger)
    device_tokens: Mapped[int | None] = mapped_column(BigInteger)
    host_tokens: Mapped[int | None] = mapped_column(BigInteger)
    token_usage: Mapped[float | None] = mapped_column(Double)
    queued_requests: Mapped[int | None] = mapped_column(Integer)
    running_requests: Mapped[int | None] = mapped_column(Integer)
    cache_hit_rate: Mapped[float | None] = mapped_column(Double)
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON)

    __table_args__ = (
        # capacity_samples(host, since): a time range of one host.
        Index("ix_capacity_samples_host_at", "host", "at"),
    )


class ReportScheduleRow(Base):
    __tablename__ = "report_schedules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    channel: Mapped[str] = mapped_column(String(CHANNEL))
    host: Mapped[str | None] = mapped_column(String(HOST))
    cadence: Mapped[str] = mapped_column(String(128))
    next_run_at: Mapped[datetime] = mapped_column(UTCDateTime)
    created_by: Mapped[str] = mapped_column(String(USER))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    enabled: Mapped[bool] = mapped_column(Boolean)

    __table_args__ = (
        # due_schedules(now): enabled ones whose time has come.
        Index("ix_report_schedules_enabled_next_run_at", "enabled", "next_run_at"),
        Index("ix_report_schedules_channel", "channel"),
    )


class SchedulerLockRow(Base):
    """One row per scheduler name: the process that owns it and its last heartbeat."""

    __tablename__ = "scheduler_locks"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)


class RolloutRow(Base):
    """One rollout over a fleet (migration 0005): what, who, where it stands."""

    __tablename__ = "rollouts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(HOST))
    kind: Mapped[str] = mapped_column(String(32))
    change: Mapped[str] = mapped_column(String(128))
    ratio: Mapped[float | None] = mapped_column(Double)
    size_gb: Mapped[int | None] = mapped_column(Integer)
    proposed_by: Mapped[str] = mapped_column(String(USER))
    applied_by: Mapped[str | None] = mapped_column(String(USER))
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    channel: Mapped[str | None] = mapped_column(String(CHANNEL))
    message_ts: Mapped[str | None] = mapped_column(String(TS))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        CheckConstraint(f"state IN ({_ROLLOUT_STATES})", name="state"),
        # unfinished_rollouts(), last_rollout(fleet).
        Index("ix_rollouts_state", "state"),
        Index("ix_rollouts_fleet_created_at", "fleet", "created_at"),
    )


class RolloutReplicaRow(Base):
    """One replica's line of a rollout, in rollout order (``position``)."""

    __tablename__ = "rollout_replicas"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(HOST))
    url: Mapped[str] = mapped_column(Text)
    phase: Mapped[str] = mapped_column(String(16))
    planned: Mapped[str | None] = mapped_column(Text)
    # The replica's own proposal (a fleet resize records one per host); SET NULL keeps the line.
    proposal_id: Mapped[int | None] = mapped_column(ForeignKey("proposals.id", ondelete="SET NULL"))
    agent_operation_id: Mapped[int | None] = mapped_column(BigInteger)
    agent_revision_id: Mapped[int | None] = mapped_column(BigInteger)
    old_config: Mapped[str | None] = mapped_column(String(128))
    new_config: Mapped[str | None] = mapped_column(String(128))
    detail: Mapped[str | None] = mapped_column(Text)
    seconds: Mapped[float | None] = mapped_column(Double)

    __table_args__ = (
        UniqueConstraint("rollout_id", "host"),
        CheckConstraint(f"phase IN ({_REPLICA_PHASES})", name="phase"),
        Index("ix_rollout_replicas_proposal_id", "proposal_id"),
    )
