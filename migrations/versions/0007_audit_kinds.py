"""What each revision of the audit is, a replica left as it was, and one proposal for a fleet.

Revision ID: 0007_audit_kinds
Revises: 0006_revisions_by_time
Create Date: 2026-12-01

- ``revisions.kind``: ``change`` (a new configuration), ``live`` (one made through SGLang's
  runtime API, no restart), ``restart`` (the same one started again)
  or ``rollback`` (a return to an earlier one); history and the charts tell them apart. Rows
  with ``rollback_of`` set become ``rollback``, every other row ``change``.
- ``revisions.outcome`` may also be ``unchanged``: a fleet's replica the rollout did not touch
  (already at the setting, or never reached), which is not ``applied``.
- ``proposal_replicas``: the revisions of one proposal over a whole fleet, one per replica, so
  the fleet takes one proposal id (the proposal's own ``revision_id`` is its first replica's).

Downgrading drops the table and the column, and turns ``unchanged`` back into ``expired`` (the
nearest outcome 0006 knows: nothing ran).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_audit_kinds"
down_revision: str | Sequence[str] | None = "0006_revisions_by_time"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_OUTCOMES = (
    "'proposed', 'cancelled', 'expired', 'refused', 'applied', 'ready', 'failed', 'rolled_back'"
)
OUTCOMES = f"{OLD_OUTCOMES}, 'unchanged'"
KINDS = "'change', 'restart', 'rollback', 'live'"


# 0001 named the outcome check ``outcome`` through the naming convention and once more by
# hand: it is ``ck_revisions_ck_revisions_outcome`` in every database up to 0006. 0007 names the
# checks as the models do; ``op.f`` keeps a name from being run through the convention again.
_OLD_OUTCOME_CHECK = "ck_revisions_ck_revisions_outcome"


def upgrade() -> None:
    with op.batch_alter_table("revisions") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="change"))
        batch.drop_constraint(op.f(_OLD_OUTCOME_CHECK), type_="check")
        batch.create_check_constraint(op.f("ck_revisions_outcome"), f"outcome IN ({OUTCOMES})")
        batch.create_check_constraint(op.f("ck_revisions_kind"), f"kind IN ({KINDS})")
    op.execute(sa.text("UPDATE revisions SET kind = 'rollback' WHERE rollback_of IS NOT NULL"))
    op.create_table(
        "proposal_replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("proposal_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("revision_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_proposal_replicas"),
        sa.ForeignKeyConstraint(
            ["proposal_id"],
            ["proposals.id"],
            name="fk_proposal_replicas_proposal_id_proposals",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["revision_id"],
            ["revisions.id"],
            name="fk_proposal_replicas_revision_id_revisions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("proposal_id", "host", name="uq_proposal_replicas_proposal_id_host"),
        sa.UniqueConstraint("revision_id", name="uq_proposal_replicas_revision_id"),
    )


def downgrade() -> None:
    op.drop_table("proposal_replicas")
    op.execute(sa.text("UPDATE revisions SET outcome = 'expired' WHERE outcome = 'unchanged'"))
    with op.batch_alter_table("revisions") as batch:
        batch.drop_constraint(op.f("ck_revisions_kind"), type_="check")
        batch.drop_constraint(op.f("ck_revisions_outcome"), type_="check")
        batch.create_check_constraint(op.f(_OLD_OUTCOME_CHECK), f"outcome IN ({OLD_OUTCOMES})")
        batch.drop_column("kind")
