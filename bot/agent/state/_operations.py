"""Operations and their events in the agent's state: recording one whole, its resume point,
its state as it moves, and the gap-free events long-polls read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from bot.agent.state._base import StateBase
from bot.agent.state._rows import insert_event, insert_operation, insert_revision
from bot.agent.state._schema import events as _events
from bot.agent.state._schema import operations as _operations
from bot.agent.state.resume_point import ResumePoint, Stage, Step
from bot.agent.state.views import OperationView, ProgressEvent
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationKind, OperationState

__all__ = ["OperationsMixin"]

_OPERATION_FIELDS = frozenset(
    {"state", "finished_at", "plan", "revision", "rollback_of", "outcome", "failure"}
)


class OperationsMixin(StateBase):
    def create_operation(
        self,
        *,
        kind: OperationKind,
        actor: str,
        created_at: str,
        request: Mapping[str, Any],
        plan: Mapping[str, Any] | None,
        revision: int | None = None,
        rollback_of: int | None = None,
        state: OperationState = OperationState.RUNNING,
        caller: str | None = None,
    ) -> int:
        with self._guard("record an operation"), self._write("create_operation") as conn:
            return insert_operation(
                conn,
                kind=kind,
                actor=actor,
                created_at=created_at,
                request=request,
                plan=plan,
                revision=revision,
                rollback_of=rollback_of,
                state=state,
                caller=caller,
            )

    def record_operation(
        self,
        *,
        kind: OperationKind,
        actor: str,
        created_at: str,
        request: Mapping[str, Any],
        plan: Mapping[str, Any] | None,
        argv: Sequence[str],
        hicache: Mapping[str, Any],
        rollback_of: int | None,
        caller: str | None,
        expected_gb: float | None,
        message: str,
        data: Mapping[str, Any],
    ) -> tuple[int, int]:
        """A new running operation, whole, in one transaction: the operation, the revision it
        starts (``argv``), its resume point (stopping, in the apply stage) and its first event
        (planned, ``message``; ``data`` gets the revision's id). Returns ``(operation id,
        revision id)``."""
        with self._guard("record an operation"), self._write("record_operation") as conn:
            op_id = insert_operation(
                conn, kind=kind, actor=actor, created_at=created_at, request=request, plan=plan,
                rollback_of=rollback_of, caller=caller,
            )  # fmt: skip
            rev_id = insert_revision(
                conn, argv=argv, hicache=hicache, created_at=created_at, actor=actor,
                kind=OperationKind(kind).value, rollback_of=rollback_of, operation_id=op_id,
            )  # fmt: skip
            point = ResumePoint(
                Stage.APPLY, Step.STOPPING, rev_id, tuple(argv), expected_gb=expected_gb
            )
            conn.execute(
                _operations.update()
                .where(_operations.c.id == op_id)
                .values(revision=rev_id, resume_point=point.to_json())
            )
            insert_event(
                conn, op_id, at=created_at, phase=EventPhase.PLANNED, message=message,
                progress=0.0, data={**data, "revision": rev_id},
            )  # fmt: skip
        self._notify_changed()
        return op_id, rev_id

    def update_operation(self, op_id: int, **fields: Any) -> None:
        unknown = set(fields) - _OPERATION_FIELDS
        if unknown:
            raise ValueError(f"not an operation field: {sorted(unknown)}")
        with self._guard("update an operation"), self._write("update_operation") as conn:
            conn.execute(_operations.update().where(_operations.c.id == op_id).values(**fields))
        self._notify_changed()

    def operation(self, op_id: int) -> OperationView | None:
        with self._guard("read an operation"), self._engine.connect() as conn:
            row = conn.execute(sa.select(_operations).where(_operations.c.id == op_id)).first()
        return None if row is None else _operation_view(row._mapping)

    def save_resume_point(self, op_id: int, point: ResumePoint) -> None:
        """Persist where ``op_id`` stands (see ``ResumePoint``)."""
        with (
            self._guard("save an operation's resume point"),
            self._write("save_resume_point") as conn,
        ):
            conn.execute(
                _operations.update()
                .where(_operations.c.id == op_id)
                .values(resume_point=point.to_json())
            )

    def resume_point(self, op_id: int) -> ResumePoint | None:
        """Where ``op_id`` stands, or None if nothing was saved."""
        with self._guard("read an operation"), self._engine.connect() as conn:
            value = conn.execute(
                sa.select(_operations.c.resume_point).where(_operations.c.id == op_id)
            ).scalar()
        return None if value is None else ResumePoint.from_json(value)

    def operations(self, limit: int = 20) -> list[OperationView]:
        """The most recent operations first."""
        query = sa.select(_operations).order_by(_operations.c.id.desc()).limit(max(0, limit))
        with self._guard("list operations"), self._engine.connect() as conn:
            return [_operation_view(row._mapping) for row in conn.execute(query)]

    def unfinished_operations(self) -> list[OperationView]:
        query = (
            sa.select(_operations)
            .where(_operations.c.state.not_in(sorted(s.value for s in FINAL_OPERATION_STATES)))
            .order_by(_operations.c.id)
        )
        with self._guard("list operations"), self._engine.connect() as conn:
            return [_operation_view(row._mapping) for row in conn.execute(query)]

    def append_event(
        self,
        op_id: int,
        *,
        at: str,
        phase: EventPhase,
        message: str,
        progress: float,
        data: Mapping[str, Any] | None = None,
        state: OperationState | None = None,
    ) -> ProgressEvent:
        """Commit the next event of ``op_id`` (and, with ``state``, the operation's new state in
        the same transaction), then wake the waiters."""
        with self._guard("record an event"), self._write("append_event") as conn:
            event = insert_event(
                conn, op_id, at=at, phase=phase, message=message, progress=progress, data=data
            )
            if state is not None:
                conn.execute(
                    _operations.update()
                    .where(_operations.c.id == op_id)
                    .values(state=OperationState(state).value)
                )
        self._notify_changed()
        return event

    def events(self, op_id: int, after: int = 0) -> list[ProgressEvent]:
        query = (
            sa.select(_events)
            .where(_events.c.op_id == op_id, _events.c.seq > after)
            .order_by(_events.c.seq)
        )
        with self._guard("read events"), self._engine.connect() as conn:
            return [
                ProgressEvent(
                    seq=row.seq,
                    at=row.at,
                    phase=EventPhase(row.phase),
                    message=row.message,
                    progress=row.progress,
                    data=dict(row.data or {}),
                )
                for row in conn.execute(query)
            ]


def _operation_view(row: sa.RowMapping) -> OperationView:
    return OperationView(
        id=row["id"],
        kind=OperationKind(row["kind"]),
        state=OperationState(row["state"]),
        actor=row["actor"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        request=dict(row["request"] or {}),
        plan=row["plan"],
        revision=row["revision"],
        rollback_of=row["rollback_of"],
        outcome=row["outcome"],
        failure=row["failure"],
        caller=row["caller"],
    )
