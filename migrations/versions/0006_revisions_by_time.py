"""Read the history of every host newest first from an index, not by sorting the whole table.

Revision ID: 0006_revisions_by_time
Revises: 0005_fleet_rollouts
Create Date: 2026-11-30

- ``ix_revisions_proposed_at_id`` on ``revisions (proposed_at, id)``: ``history`` without a host
  (``/kimi history``, ``kimi-ops history``) orders by ``proposed_at DESC, id DESC`` and takes the
  first few rows. The only index on ``proposed_at`` led with ``host``, so every such read sorted
  all revisions: 390 ms on SQLite and 121 ms on PostgreSQL at 100,000 revisions (p95). Both
  engines walk this index backwards and stop after ``limit`` rows (docs/benchmarks.md).

No row changes; downgrading drops the index.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006_revisions_by_time"
down_revision: str | Sequence[str] | None = "0005_fleet_rollouts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_revisions_proposed_at_id", "revisions", ["proposed_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_revisions_proposed_at_id", table_name="revisions")
