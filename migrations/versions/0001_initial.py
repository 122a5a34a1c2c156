"""Create the store: revisions, proposals, operations and their events, refusals, capacity
samples and report schedules.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Hand-checked against bot/store/_models.py (tests/store/test_migrate.py compares the migrated
schema with the models). Types are spelled out here rather than imported from the models, so this
file keeps creating the same schema whatever the models become later. Timestamps are
``timestamptz`` on PostgreSQL; SQLite stores naive UTC text (the app re-attaches UTC).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OUTCOMES = (
    "'proposed', 'cancelled', 'expired', 'refused', 'applied', 'ready', 'failed', 'rolled_back'"
)


def _instant(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "revisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("hicache_enabled", sa.Boolean(), nullable=False),
        sa.Column("hicache_ratio", sa.Double(), nullable=True),
        sa.Column("hicache_size_gb", sa.Integer(), nullable=True),
        sa.Column("hicache_write_policy", sa.String(64), nullable=True),
        sa.Column("hicache_io_backend", sa.String(64), nullable=True),
        sa.Column("command_line", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("plan_per_rank_gb", sa.Double(), nullable=False),
        sa.Column("plan_total_gb", sa.Double(), nullable=False),
        sa.Column("plan_per_rank_tokens", sa.BigInteger(), nullable=False),
        sa.Column("plan_verdict", sa.String(32), nullable=False),
        sa.Column("plan_reason", sa.Text(), nullable=False),
        sa.Column("proposed_by", sa.String(64), nullable=True),
        sa.Column("applied_by", sa.String(64), nullable=True),
        _instant("proposed_at"),
        _instant("applied_at", nullable=True),
        _instant("finished_at", nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("startup_seconds", sa.Double(), nullable=True),
        sa.Column("device_tokens", sa.BigInteger(), nullable=True),
        sa.Column("host_gb_per_rank", sa.Double(), nullable=True),
        sa.Column("host_tokens_per_rank", sa.BigInteger(), nullable=True),
        sa.Column("failure_kind", sa.String(64), nullable=True),
        sa.Column("failure_lines", sa.JSON(), nullable=False),
        sa.Column("rollback_of", sa.Integer(), nullable=True),
        sa.Column("returned_to", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_revisions"),
        sa.CheckConstraint(f"outcome IN ({OUTCOMES})", name="ck_revisions_outcome"),
        sa.ForeignKeyConstraint(
            ["rollback_of"],
            ["revisions.id"],
            name="fk_revisions_rollback_of_revisions",
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["returned_to"],
            ["revisions.id"],
            name="fk_revisions_returned_to_revisions",
            ondelete="RESTRICT",
        ),
    )
    op.create_index("ix_revisions_host_proposed_at", "revisions", ["host", "proposed_at"])
    op.create_index(
        "ix_revisions_host_outcome_finished_at", "revisions", ["host", "outcome", "finished_at"]
    )
    op.create_index("ix_revisions_rollback_of", "revisions", ["rollback_of"])
    op.create_index("ix_revisions_returned_to", "revisions", ["returned_to"])

    op.create_table(
        "proposals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("revision_id", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("message_ts", sa.String(32), nullable=True),
        _instant("expires_at"),
        sa.Column("fingerprint", sa.String(128), nullable=False),
        sa.Column("requested", sa.JSON(), nullable=False),
        _instant("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_proposals"),
        sa.UniqueConstraint("revision_id", name="uq_proposals_revision_id"),
        sa.ForeignKeyConstraint(
            ["revision_id"],
            ["revisions.id"],
            name="fk_proposals_revision_id_revisions",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_proposals_channel_message_ts", "proposals", ["channel", "message_ts"])

    op.create_table(
        "operations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent_operation_id", sa.String(128), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("channel", sa.String(64), nullable=True),
        sa.Column("message_ts", sa.String(32), nullable=True),
        sa.Column("revision_id", sa.Integer(), nullable=True),
        sa.Column("last_event_seq", sa.Integer(), nullable=False),
        _instant("started_at"),
        _instant("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_operations"),
        sa.UniqueConstraint(
            "host", "agent_operation_id", name="uq_operations_host_agent_operation_id"
        ),
        sa.CheckConstraint("last_event_seq >= 0", name="ck_operations_last_event_seq"),
        sa.ForeignKeyConstraint(
            ["revision_id"],
            ["revisions.id"],
            name="fk_operations_revision_id_revisions",
            ondelete="RESTRICT",
        ),
    )
    op.create_index("ix_operations_finished_at", "operations", ["finished_at"])
    op.create_index("ix_operations_revision_id", "operations", ["revision_id"])
    op.create_index("ix_operations_host_started_at", "operations", ["host", "started_at"])

    op.create_table(
        "operation_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("operation_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        _instant("at"),
        sa.Column("phase", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("progress", sa.Double(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_operation_events"),
        sa.UniqueConstraint("operation_id", "seq", name="uq_operation_events_operation_id_seq"),
        sa.CheckConstraint("seq >= 1", name="ck_operation_events_seq"),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.id"],
            name="fk_operation_events_operation_id_operations",
            ondelete="CASCADE",
        ),
    )

    op.create_table(
        "refusals",
        sa.Column("id", sa.Integer(), nullable=False),
        _instant("at"),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("channel", sa.String(64), nullable=True),
        sa.Column("revision_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_refusals"),
        sa.ForeignKeyConstraint(
            ["revision_id"],
            ["revisions.id"],
            name="fk_refusals_revision_id_revisions",
            ondelete="SET NULL",
        ),
    )
    op.create_index("ix_refusals_at", "refusals", ["at"])
    op.create_index("ix_refusals_user_id_at", "refusals", ["user_id", "at"])
    op.create_index("ix_refusals_revision_id", "refusals", ["revision_id"])

    op.create_table(
        "capacity_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        _instant("at"),
        sa.Column("ram_total_bytes", sa.BigInteger(), nullable=True),
        sa.Column("ram_available_bytes", sa.BigInteger(), nullable=True),
        sa.Column("hicache_host_bytes", sa.BigInteger(), nullable=True),
        sa.Column("device_tokens", sa.BigInteger(), nullable=True),
        sa.Column("host_tokens", sa.BigInteger(), nullable=True),
        sa.Column("token_usage", sa.Double(), nullable=True),
        sa.Column("queued_requests", sa.Integer(), nullable=True),
        sa.Column("running_requests", sa.Integer(), nullable=True),
        sa.Column("cache_hit_rate", sa.Double(), nullable=True),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_capacity_samples"),
    )
    op.create_index("ix_capacity_samples_host_at", "capacity_samples", ["host", "at"])

    op.create_table(
        "report_schedules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("cadence", sa.String(128), nullable=False),
        _instant("next_run_at"),
        sa.Column("created_by", sa.String(64), nullable=False),
        _instant("created_at"),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_report_schedules"),
    )
    op.create_index(
        "ix_report_schedules_enabled_next_run_at", "report_schedules", ["enabled", "next_run_at"]
    )
    op.create_index("ix_report_schedules_channel", "report_schedules", ["channel"])


def downgrade() -> None:
    # Children before parents; dropping a table drops its indexes.
    for table in (
        "report_schedules",
        "capacity_samples",
        "refusals",
        "operation_events",
        "operations",
        "proposals",
        "revisions",
    ):
        op.drop_table(table)
