"""Link the store to the host agents: their revision ids on revisions, their operation ids as
integers on operations.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

- ``revisions.agent_revision_id``: the agent's id for the command line this revision ran;
- ``revisions.agent_returned_to``: for a rollback, the agent's id of the revision it returned to;
- ``operations.agent_operation_id``: text -> BIGINT, as the agent numbers its operations
  (``GET /v1/operations/{id}``). A stored id that is not a whole number stops the upgrade with the
  rows named and nothing changed, rather than being cast to 0 (as SQLite's CAST would);
- ``revisions.plan_per_rank_gb``, ``plan_total_gb``, ``plan_per_rank_tokens`` may be NULL: a
  figure the planner could not work out is unknown, not 0.

The full command line the agent wrote already has its column (``revisions.command_line``).
Downgrading drops the two revision columns, turns the operation ids back into text and, as 0001
had no way to say "unknown", stores an unknown plan figure as 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.errors import MigrationError

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIGINT_MAX = 2**63 - 1


def _check_operation_ids() -> None:
    rows = op.get_bind().execute(sa.text("SELECT id, agent_operation_id FROM operations"))
    bad = [
        (row_id, value)
        for row_id, value in rows
        if not (str(value).isdigit() and int(value) <= _BIGINT_MAX)
    ]
    if bad:
        shown = ", ".join(f"operation {row_id}: {value!r}" for row_id, value in bad[:5])
        raise MigrationError(
            f"{len(bad)} stored agent operation id(s) are not whole numbers ({shown}); agents "
            "number their operations 1, 2, 3...: correct or delete those rows, then upgrade again"
        )


_PLAN_FIGURES = (
    ("plan_per_rank_gb", sa.Double()),
    ("plan_total_gb", sa.Double()),
    ("plan_per_rank_tokens", sa.BigInteger()),
)


def upgrade() -> None:
    _check_operation_ids()
    with op.batch_alter_table("revisions") as batch:
        for name, type_ in _PLAN_FIGURES:
            batch.alter_column(name, existing_type=type_, nullable=True)
        batch.add_column(sa.Column("agent_revision_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("agent_returned_to", sa.BigInteger(), nullable=True))
        batch.create_index(
            "ix_revisions_host_agent_revision_id", ["host", "agent_revision_id"], unique=False
        )
    with op.batch_alter_table("operations") as batch:
        batch.alter_column(
            "agent_operation_id",
            existing_type=sa.String(128),
            type_=sa.BigInteger(),
            existing_nullable=False,
            postgresql_using="agent_operation_id::bigint",
        )


def downgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.alter_column(
            "agent_operation_id",
            existing_type=sa.BigInteger(),
            type_=sa.String(128),
            existing_nullable=False,
            postgresql_using="agent_operation_id::text",
        )
    for name, _type in _PLAN_FIGURES:
        op.execute(sa.text(f"UPDATE revisions SET {name} = 0 WHERE {name} IS NULL"))
    with op.batch_alter_table("revisions") as batch:
        for name, type_ in _PLAN_FIGURES:
            batch.alter_column(name, existing_type=type_, nullable=False)
        batch.drop_index("ix_revisions_host_agent_revision_id")
        batch.drop_column("agent_returned_to")
        batch.drop_column("agent_revision_id")
