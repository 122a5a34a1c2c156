"""Record which agent token started each operation.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

- ``operations.caller``: the name of the agent token (``NAME:TOKEN`` in the agent's token
  variable) that started the operation, as the agent reports it; NULL for an unnamed token and for
  operations recorded before agents reported it. The ``actor`` on the revision says which person
  asked; the caller says which bot (or person with curl) carried the request to the agent.

Downgrading drops the column and what it held.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("caller", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("caller")
