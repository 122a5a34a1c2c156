"""Operations and their events: what a restarted bot needs to pick up where it stopped.

The agent numbers each operation's events from 1; the bot stores every batch it receives with
:meth:`append_events`, which skips sequence numbers it already has (a replayed long-poll batch
stores nothing twice) and moves ``last_event_seq``, the point a restarted bot resumes from.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Insert, Table, case, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from bot.errors import InputError, NotFound
from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._convert import event_record, operation_record
from bot.store._lookup import row_by_id
from bot.store._models import (
    CHANNEL,
    HOST,
    TS,
    USER,
    OperationEventRow,
    OperationRow,
    RevisionRow,
)
from bot.store.records import OperationRecord, StoredEvent
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationKind, OperationState

__all__ = ["OperationsMixin"]

_EVENTS = cast(Table, OperationEventRow.__table__)
_OPERATIONS = cast(Table, OperationRow.__table__)


def _event_values(operation_id: int, event: object) -> dict[str, Any]:
    if not isinstance(event, StoredEvent):
        raise InputError(f"events must be StoredEvent values, not {type(event).__name__}")
    seq = v.count("event seq", event.seq, minimum=1, big=False)
    return {
        "operation_id": operation_id,
        "seq": seq,
        "at": v.instant(f"event {seq} time", event.at),
        "phase": v.member(f"event {seq} phase", EventPhase, event.phase).value,
        "message": v.free_text(f"event {seq} message", event.message),
        "progress": v.optional_finite(f"event {seq} progress", event.progress, minimum=0),
        "data": v.json_object(f"event {seq} data", event.data),
    }


def _insert_ignoring_duplicates(session: Session) -> Insert:
    # A replayed batch holds seqs already stored: ON CONFLICT skips them, and the insert's
    # RETURNING names only the rows it added.
    name = session.get_bind().dialect.name
    if name == "sqlite":
        return sqlite.insert(_EVENTS).on_conflict_do_nothing(index_elements=["operation_id", "seq"])
    if name == "postgresql":
        return postgresql.insert(_EVENTS).on_conflict_do_nothing(
            index_elements=["operation_id", "seq"]
        )
    return insert(_EVENTS)


class OperationsMixin(StoreBase):
    def record_operation(
        self,
        host: str,
        agent_operation_id: int,
        kind: OperationKind | str,
        *,
        state: OperationState | str = OperationState.RUNNING,
        channel: str | None = None,
        message_ts: str | None = None,
        revision_id: int | None = None,
        started_at: datetime | None = None,
        caller: str | None = None,
    ) -> OperationRecord:
        """Record an operation the agent started; recording the same one again returns it as is.
        ``caller`` is the name of the agent token that started it."""
        values = {
            "host": v.text("host", host, HOST),
            "agent_operation_id": v.count("agent operation id", agent_operation_id, minimum=1),
            "kind": v.member("operation kind", OperationKind, kind).value,
            "state": v.member("operation state", OperationState, state).value,
            "channel": v.optional_text("channel", channel, CHANNEL),
            "message_ts": v.optional_text("message ts", message_ts, TS),
            "caller": v.optional_text("caller", caller, USER),
        }
        when = self._at(started_at, "started_at")
        with self._write("record an operation") as session:
            existing = session.scalars(
                select(OperationRow).where(
                    OperationRow.host == values["host"],
                    OperationRow.agent_operation_id == values["agent_operation_id"],
                )
            ).one_or_none()
            if existing is not None:
                return operation_record(existing)
            rid = None if revision_id is None else row_by_id(session, RevisionRow, revision_id).id
            row = OperationRow(
                **values, revision_id=rid, last_event_seq=0, started_at=when, finished_at=None
            )
            session.add(row)
            session.flush()
            return operation_record(row)

    def update_operation(
        self,
        operation_id: int,
        *,
        state: OperationState | str | None = None,
        channel: str | None = None,
        message_ts: str | None = None,
    ) -> OperationRecord:
        """Change an operation's state or the Slack message that shows it."""
        new_state = v.optional_member("operation state", OperationState, state)
        new_channel = v.optional_text("channel", channel, CHANNEL)
        new_ts = v.optional_text("message ts", message_ts, TS)
        with self._write("update an operation") as session:
            row = row_by_id(session, OperationRow, operation_id, lock=True)
            if new_state is not None:
                row.state = new_state.value
            if new_channel is not None:
                row.channel = new_channel
            if new_ts is not None:
                row.message_ts = new_ts
            return operation_record(row)

    def finish_operation(
        self, operation_id: int, state: OperationState | str, at: datetime | None = None
    ) -> OperationRecord:
        """Mark an operation finished with its final state; finishing it again changes nothing."""
        final = v.member("operation state", OperationState, state)
        if final not in FINAL_OPERATION_STATES:
            ends = ", ".join(sorted(s.value for s in FINAL_OPERATION_STATES))
            raise InputError(f"operation state {final.value!r} is not final; use one of: {ends}")
        when = self._at(at)
        with self._write("finish an operation") as session:
            row = row_by_id(session, OperationRow, operation_id, lock=True)
            if row.finished_at is None:
                row.state, row.finished_at = final.value, when
            return operation_record(row)

    def append_events(self, operation_id: int, events: Iterable[StoredEvent]) -> int:
        """Store a batch of events in one transaction; returns how many were new."""
        oid = v.count("operation id", operation_id, minimum=1)
        by_seq: dict[int, dict[str, Any]] = {}
        for event in events:
            values = _event_values(oid, event)
            by_seq.setdefault(values["seq"], values)
        if not by_seq:
            return 0
        last, resume_point = max(by_seq), _OPERATIONS.c.last_event_seq
        with self._write("store operation events") as session:
            # Two statements a batch: the first moves the resume point, locks the operation's row
            # (SQLite's BEGIN IMMEDIATE has locked the database) and says whether it exists; the
            # second stores the events. Reading the row, then the seqs already stored, then
            # writing the row back took four round trips (docs/benchmarks.md, Store).
            moved = session.execute(
                update(_OPERATIONS)
                .where(_OPERATIONS.c.id == oid)
                .values(last_event_seq=case((resume_point < last, last), else_=resume_point))
                .returning(_OPERATIONS.c.id)
            ).first()
            if moved is None:
                raise NotFound(f"no operation {oid} is recorded")
            added = session.scalars(
                _insert_ignoring_duplicates(session).returning(_EVENTS.c.seq),
                [values for _, values in sorted(by_seq.items())],
            ).all()
            return len(added)

    def operation_events(self, operation_id: int, after_seq: int = 0) -> list[StoredEvent]:
        """The operation's events with ``seq > after_seq``, in order."""
        oid = v.count("operation id", operation_id, minimum=1)
        after = v.count("after seq", after_seq, big=False)
        with self._read("read operation events") as session:
            row_by_id(session, OperationRow, oid)
            rows = session.scalars(
                select(OperationEventRow)
                .where(OperationEventRow.operation_id == oid, OperationEventRow.seq > after)
                .order_by(OperationEventRow.seq)
            )
            return [event_record(row) for row in rows]

    def operation_resume_point(self, operation_id: int) -> int:
        """The last event seq stored: a restarted bot asks the agent for what came after it."""
        with self._read("read an operation") as session:
            return row_by_id(session, OperationRow, operation_id).last_event_seq

    def operation(self, operation_id: int) -> OperationRecord:
        with self._read("read an operation") as session:
            return operation_record(row_by_id(session, OperationRow, operation_id))

    def operation_by_agent_id(self, host: str, agent_operation_id: int) -> OperationRecord | None:
        """The store's record of the host agent's operation ``agent_operation_id``, if any."""
        name = v.text("host", host, HOST)
        agent_id = v.count("agent operation id", agent_operation_id, minimum=1)
        with self._read("read an operation") as session:
            row = session.scalars(
                select(OperationRow).where(
                    OperationRow.host == name, OperationRow.agent_operation_id == agent_id
                )
            ).one_or_none()
            return None if row is None else operation_record(row)

    def unfinished_operations(self, host: str | None = None) -> list[OperationRecord]:
        """Operations not finished yet, oldest first: what a restarted bot resumes watching."""
        query = select(OperationRow).where(OperationRow.finished_at.is_(None))
        if host is not None:
            query = query.where(OperationRow.host == v.text("host", host, HOST))
        query = query.order_by(OperationRow.started_at, OperationRow.id)
        with self._read("read unfinished operations") as session:
            return [operation_record(row) for row in session.scalars(query)]
