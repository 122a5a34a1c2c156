"""The report scheduler's lease: which bot process runs the scheduler on this database.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

- ``scheduler_locks``: one row per scheduler name, its owner (host, pid, a random tag), when it
  took the lease and its last heartbeat. A second bot that finds a fresh heartbeat refuses to run
  its scheduler, so no report is posted twice.

APScheduler's own job table (``apscheduler_jobs``) is created by APScheduler in the same database
and left out of autogenerate (``FOREIGN_TABLES``), so no migration manages it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "scheduler_locks",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scheduler_locks")),
    )


def downgrade() -> None:
    op.drop_table("scheduler_locks")
