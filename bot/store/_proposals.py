"""Proposals: the Slack side of a proposed revision (its message, expiry and fingerprint).

:meth:`~bot.store.Store.record_proposal` writes a proposal together with its revision; these
methods find one again (a button click names the message it sits on), attach the message ts
once the message is posted, and list the applied ones whose operation was never recorded (the
bot died between the agent's accepting it and its own write).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._convert import proposal_record
from bot.store._lookup import row_by_id
from bot.store._models import CHANNEL, TS, OperationRow, ProposalRow, RevisionRow, RolloutReplicaRow
from bot.store.records import ProposalRecord, RevisionOutcome

__all__ = ["ProposalsMixin"]


class ProposalsMixin(StoreBase):
    def attach_proposal_message(self, proposal_id: int, message_ts: str) -> ProposalRecord:
        """Remember the ts of the Slack message showing the proposal (known after posting)."""
        ts = v.text("message ts", message_ts, TS)
        with self._write("attach a message to a proposal") as session:
            row = row_by_id(session, ProposalRow, proposal_id)
            row.message_ts = ts
            return proposal_record(row)

    def proposal(self, proposal_id: int) -> ProposalRecord:
        with self._read("read a proposal") as session:
            return proposal_record(row_by_id(session, ProposalRow, proposal_id))

    def proposal_for_revision(self, revision_id: int) -> ProposalRecord | None:
        rid = v.count("revision id", revision_id, minimum=1)
        with self._read("read a proposal") as session:
            row = session.scalars(
                select(ProposalRow).where(ProposalRow.revision_id == rid)
            ).one_or_none()
            return None if row is None else proposal_record(row)

    def proposal_by_message(self, channel: str, message_ts: str) -> ProposalRecord | None:
        """The proposal shown by a Slack message (a button click names its message)."""
        ch, ts = v.text("channel", channel, CHANNEL), v.text("message ts", message_ts, TS)
        with self._read("read a proposal") as session:
            row = session.scalars(
                select(ProposalRow)
                .where(ProposalRow.channel == ch, ProposalRow.message_ts == ts)
                .order_by(ProposalRow.id.desc())
                .limit(1)
            ).one_or_none()
            return None if row is None else proposal_record(row)

    def expired_open_proposals(self, now: datetime) -> list[ProposalRecord]:
        """Proposals nobody applied or cancelled whose time ran out at or before ``now``, oldest
        first: what a sweep records expired and closes without waiting for a click."""
        query = (
            select(ProposalRow)
            .join(RevisionRow, RevisionRow.id == ProposalRow.revision_id)
            .where(
                RevisionRow.outcome == RevisionOutcome.PROPOSED.value,
                ProposalRow.expires_at <= v.instant("now", now),
            )
            .order_by(ProposalRow.expires_at, ProposalRow.id)
        )
        with self._read("read expired proposals") as session:
            return [proposal_record(row) for row in session.scalars(query)]

    def applied_without_operation(self) -> list[ProposalRecord]:
        """Proposals applied (their revision's outcome is ``applied``) for which no operation
        is recorded, oldest first. A fleet replica's proposal is not one: its operation is the
        rollout's, recorded on the rollout's line and carried on by the fleet desk."""
        started = select(OperationRow.revision_id).where(OperationRow.revision_id.is_not(None))
        in_rollouts = select(RolloutReplicaRow.proposal_id).where(
            RolloutReplicaRow.proposal_id.is_not(None)
        )
        with self._read("read applied proposals") as session:
            rows = session.scalars(
                select(ProposalRow)
                .join(RevisionRow, RevisionRow.id == ProposalRow.revision_id)
                .where(
                    RevisionRow.outcome == RevisionOutcome.APPLIED.value,
                    ProposalRow.revision_id.not_in(started),
                    ProposalRow.id.not_in(in_rollouts),
                )
                .order_by(ProposalRow.id)
            )
            return [proposal_record(row) for row in rows]
