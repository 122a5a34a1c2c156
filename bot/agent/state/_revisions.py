"""Revisions in the agent's state: the command lines this host ran, how each start went, and
what they tell later operations (where a rollback returns to, how long a start takes, the
device pool the last start logged)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from bot.agent.state._base import StateBase
from bot.agent.state._rows import insert_revision
from bot.agent.state._schema import revisions as _revisions
from bot.agent.state.views import RevisionOutcome, RevisionView
from bot.planner import StartSample

__all__ = ["RevisionsMixin"]

_REVISION_FIELDS = frozenset(
    {
        "outcome",
        "became_ready",
        "startup_s",
        "device_tokens",
        "kv_bytes_per_token",
        "host_gb_per_rank",
        "host_tokens_per_rank",
        "finished_at",
        "operation_id",
    }
)


class RevisionsMixin(StateBase):
    def add_revision(
        self,
        *,
        argv: list[str],
        hicache: Mapping[str, Any],
        created_at: str,
        actor: str,
        kind: str,
        outcome: RevisionOutcome = RevisionOutcome.PENDING,
        became_ready: bool = False,
        rollback_of: int | None = None,
        operation_id: int | None = None,
        device_tokens: int | None = None,
        kv_bytes_per_token: float | None = None,
    ) -> int:
        with self._guard("record a revision"), self._write("add_revision") as conn:
            return insert_revision(
                conn,
                argv=argv,
                hicache=hicache,
                created_at=created_at,
                actor=actor,
                kind=kind,
                outcome=outcome,
                became_ready=became_ready,
                rollback_of=rollback_of,
                operation_id=operation_id,
                device_tokens=device_tokens,
                kv_bytes_per_token=kv_bytes_per_token,
            )

    def update_revision(self, rev_id: int, **fields: Any) -> None:
        unknown = set(fields) - _REVISION_FIELDS
        if unknown:
            raise ValueError(f"not a revision field: {sorted(unknown)}")
        with self._guard("update a revision"), self._write("update_revision") as conn:
            conn.execute(_revisions.update().where(_revisions.c.id == rev_id).values(**fields))

    def revision(self, rev_id: int) -> RevisionView | None:
        with self._guard("read a revision"), self._engine.connect() as conn:
            row = conn.execute(sa.select(_revisions).where(_revisions.c.id == rev_id)).first()
        return None if row is None else _revision_view(row._mapping)

    def revisions(self) -> list[RevisionView]:
        """Every revision, newest first."""
        query = sa.select(_revisions).order_by(_revisions.c.id.desc())
        with self._guard("list revisions"), self._engine.connect() as conn:
            return [_revision_view(row._mapping) for row in conn.execute(query)]

    def rollback_target(
        self, current: int | None, current_argv: Sequence[str]
    ) -> RevisionView | None:
        """Where a rollback returns to: the newest revision that became ready, other than the
        revision ``current`` and any with the command line ``current_argv`` (returning to the
        same line would change nothing). The one rule for a rollback asked for without a
        revision and for the automatic rollback after a failed start."""
        argv = list(current_argv)
        for revision in self.revisions():
            if revision.became_ready and revision.id != current and list(revision.argv) != argv:
                return revision
        return None

    def startup_samples(self) -> list[StartSample]:
        """Earlier starts that became ready, for the expected startup time."""
        return [
            StartSample(seconds=r.startup_s, host_gb_per_rank=r.host_gb_per_rank or 0.0)
            for r in self.revisions()
            if r.became_ready and r.startup_s is not None and r.startup_s > 0
        ]

    def last_start_capacity(self) -> tuple[int, float | None, int | None, float | None] | None:
        """``(device_tokens, kv_bytes_per_token, host_tokens_per_rank, host_gb_per_rank)`` of
        the newest recorded start that logged its device pool; None if there is none."""
        for r in self.revisions():
            if r.device_tokens is not None and r.outcome is not RevisionOutcome.PENDING:
                return (r.device_tokens, r.kv_bytes_per_token, r.host_tokens_per_rank,
                        r.host_gb_per_rank)  # fmt: skip
        return None


def _revision_view(row: sa.RowMapping) -> RevisionView:
    return RevisionView(
        id=row["id"],
        argv=tuple(row["argv"]),
        hicache=dict(row["hicache"] or {}),
        outcome=RevisionOutcome(row["outcome"]),
        became_ready=bool(row["became_ready"]),
        startup_s=row["startup_s"],
        device_tokens=row["device_tokens"],
        kv_bytes_per_token=row["kv_bytes_per_token"],
        host_gb_per_rank=row["host_gb_per_rank"],
        host_tokens_per_rank=row["host_tokens_per_rank"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        actor=row["actor"],
        kind=row["kind"],
        rollback_of=row["rollback_of"],
        operation_id=row["operation_id"],
    )
