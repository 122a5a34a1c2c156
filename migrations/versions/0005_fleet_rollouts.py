"""Fleet rollouts: one row per rollout over a fleet, one per replica it touches.

Revision ID: 0005_fleet_rollouts
Revises: 0004
Create Date: 2026-11-30

- ``rollouts``: the fleet, what the rollout does (kind, the change as people read it, its ratio
  or size), who proposed and applied it, where it stands and why it stopped, the channel and
  message that show it, and when it was proposed, started and ended. A bot restarted mid-rollout
  reads the unfinished one back from here and carries it on.
- ``rollout_replicas``: each replica's line in rollout order: its phase, the plan shown, its own
  proposal (a fleet resize records one per host), the agent operation and revision its change
  produced, its old and new config, and what it reported (a drain timeout, a failure). The
  rollout and its lines are the audit record that links every replica's revision.

The allowed states and phases are written out here as they stand at this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_fleet_rollouts"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = "'proposed', 'running', 'done', 'stopped', 'refused', 'cancelled'"
PHASES = (
    "'waiting', 'removing', 'draining', 'resizing', 'adding', 'done', 'rolled_back', "
    "'failed', 'unchanged'"
)


def _instant(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fleet", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("change", sa.String(128), nullable=False),
        sa.Column("ratio", sa.Double(), nullable=True),
        sa.Column("size_gb", sa.Integer(), nullable=True),
        sa.Column("proposed_by", sa.String(64), nullable=False),
        sa.Column("applied_by", sa.String(64), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("channel", sa.String(64), nullable=True),
        sa.Column("message_ts", sa.String(32), nullable=True),
        _instant("created_at"),
        _instant("expires_at", nullable=True),
        _instant("started_at", nullable=True),
        _instant("ended_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_rollouts"),
        sa.CheckConstraint(f"state IN ({STATES})", name="ck_rollouts_state"),
    )
    op.create_index("ix_rollouts_state", "rollouts", ["state"])
    op.create_index("ix_rollouts_fleet_created_at", "rollouts", ["fleet", "created_at"])

    op.create_table(
        "rollout_replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("planned", sa.Text(), nullable=True),
        sa.Column("proposal_id", sa.Integer(), nullable=True),
        sa.Column("agent_operation_id", sa.BigInteger(), nullable=True),
        sa.Column("agent_revision_id", sa.BigInteger(), nullable=True),
        sa.Column("old_config", sa.String(128), nullable=True),
        sa.Column("new_config", sa.String(128), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("seconds", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_rollout_replicas"),
        sa.UniqueConstraint("rollout_id", "host", name="uq_rollout_replicas_rollout_id_host"),
        sa.CheckConstraint(f"phase IN ({PHASES})", name="ck_rollout_replicas_phase"),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name="fk_rollout_replicas_rollout_id_rollouts",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["proposal_id"],
            ["proposals.id"],
            name="fk_rollout_replicas_proposal_id_proposals",
            ondelete="SET NULL",
        ),
    )
    op.create_index("ix_rollout_replicas_proposal_id", "rollout_replicas", ["proposal_id"])


def downgrade() -> None:
    op.drop_index("ix_rollout_replicas_proposal_id", table_name="rollout_replicas")
    op.drop_table("rollout_replicas")
    op.drop_index("ix_rollouts_fleet_created_at", table_name="rollouts")
    op.drop_index("ix_rollouts_state", table_name="rollouts")
    op.drop_table("rollouts")
