"""Reading the audit: one revision, a host's history, the config a rollback returns to, and the
earlier starts the planner's startup estimate learns from."""

from __future__ import annotations

from sqlalchemy import Select, select

from bot.planner import StartSample
from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._convert import revision_record
from bot.store._lookup import row_by_id
from bot.store._models import (
    HOST,
    ProposalReplicaRow,
    ProposalRow,
    RevisionRow,
    RolloutReplicaRow,
)
from bot.store.records import RevisionOutcome, RevisionRecord

__all__ = ["RevisionReadsMixin", "history_query"]


def _first_known(*values: float | None) -> float:
    # As the agent's samples: a start whose pool size nobody knows counts as no pool.
    return next((value for value in values if value is not None), 0.0)


def history_query(host: str | None, limit: int) -> Select[RevisionRow]:
    """The newest ``limit`` revisions of ``host`` (of every host when None).

    Its ORDER BY is an index read backwards on both engines, which stops after ``limit`` rows:
    ``(host, proposed_at)`` for one host (SQLite appends the rowid, ``id``, to every index),
    ``(proposed_at, id)`` for all (migration 0006). Keep the two in step: an ORDER BY no index
    serves sorts every revision of the table on each read.
    """
    count = v.count("history limit", limit, minimum=1)
    query = select(RevisionRow)
    if host is not None:
        query = query.where(RevisionRow.host == v.text("host", host, HOST))
    return query.order_by(RevisionRow.proposed_at.desc(), RevisionRow.id.desc()).limit(count)


class RevisionReadsMixin(StoreBase):
    def revision(self, revision_id: int) -> RevisionRecord:
        with self._read("read a revision") as session:
            return revision_record(row_by_id(session, RevisionRow, revision_id))

    def revision_by_agent_id(self, host: str, agent_revision_id: int) -> RevisionRecord | None:
        """The newest store revision that stands for the host agent's revision
        ``agent_revision_id`` (None when none was recorded)."""
        name = v.text("host", host, HOST)
        agent_id = v.count("agent revision id", agent_revision_id, minimum=1)
        with self._read("read a revision") as session:
            row = session.scalars(
                select(RevisionRow)
                .where(RevisionRow.host == name, RevisionRow.agent_revision_id == agent_id)
                .order_by(RevisionRow.id.desc())
                .limit(1)
            ).one_or_none()
            return None if row is None else revision_record(row)

    def revision_of_rollout_operation(
        self, host: str, agent_operation_id: int
    ) -> RevisionRecord | None:
        """The revision proposed for the replica ``host`` of a rollout whose line records the
        agent's operation ``agent_operation_id`` (None when no rollout line does): the
        proposal's record of a change the agent then reports, so the two make one row."""
        name = v.text("host", host, HOST)
        op_id = v.count("agent operation id", agent_operation_id, minimum=1)
        with self._read("read a rollout's revision") as session:
            line = session.scalars(
                select(RolloutReplicaRow)
                .where(
                    RolloutReplicaRow.host == name,
                    RolloutReplicaRow.agent_operation_id == op_id,
                    RolloutReplicaRow.proposal_id.is_not(None),
                )
                .order_by(RolloutReplicaRow.id.desc())
                .limit(1)
            ).one_or_none()
            if line is None:
                return None
            linked = session.scalars(
                select(ProposalReplicaRow.revision_id).where(
                    ProposalReplicaRow.proposal_id == line.proposal_id,
                    ProposalReplicaRow.host == name,
                )
            ).one_or_none()
            if linked is None:
                proposal = session.get(ProposalRow, line.proposal_id)
                if proposal is None:
                    return None
                linked = proposal.revision_id
            row = session.get(RevisionRow, linked)
            return None if row is None or row.host != name else revision_record(row)

    def history(self, host: str | None = None, limit: int = 20) -> list[RevisionRecord]:
        """Revisions newest first (all hosts when ``host`` is None)."""
        query = history_query(host, limit)
        with self._read("read the history") as session:
            return [revision_record(row) for row in session.scalars(query)]

    def last_ready_revision(self, host: str) -> RevisionRecord | None:
        """The config a rollback returns to by default: the newest one that became ready."""
        name = v.text("host", host, HOST)
        with self._read("read the last ready revision") as session:
            row = session.scalars(
                select(RevisionRow)
                .where(
                    RevisionRow.host == name,
                    RevisionRow.outcome == RevisionOutcome.READY.value,
                )
                .order_by(RevisionRow.finished_at.desc(), RevisionRow.id.desc())
                .limit(1)
            ).one_or_none()
            return None if row is None else revision_record(row)

    def startup_durations(self, host: str, limit: int = 50) -> list[StartSample]:
        """Starts of ``host`` that became ready, newest first, as the planner's samples for the
        ETA of the next one (the agent's ``AgentState.startup_samples()`` gives the same kind).

        A start that became ready counts even if a later revision rolled it back; a failed start
        does not. The host pool is the size the log reported when known, else the planned one.
        """
        name = v.text("host", host, HOST)
        count = v.count("limit", limit, minimum=1)
        query = (
            select(RevisionRow)
            .where(
                RevisionRow.host == name,
                RevisionRow.outcome.in_(
                    [RevisionOutcome.READY.value, RevisionOutcome.ROLLED_BACK.value]
                ),
                RevisionRow.startup_seconds > 0,
                RevisionRow.failure_kind.is_(None),
                RevisionRow.finished_at.is_not(None),
            )
            .order_by(RevisionRow.finished_at.desc(), RevisionRow.id.desc())
            .limit(count)
        )
        with self._read("read startup durations") as session:
            return [
                StartSample(
                    seconds=row.startup_seconds,  # type: ignore[arg-type]  # filtered above
                    host_gb_per_rank=_first_known(row.host_gb_per_rank, row.plan_per_rank_gb),
                )
                for row in session.scalars(query)
            ]
