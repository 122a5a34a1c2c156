"""The agent's own state: operations, their events and the configs this host ran (revisions).

One SQLite file, ``<state_dir>/agent.sqlite3``, through SQLAlchemy Core on ``bot.db``'s engine
(WAL, so the HTTP layer reads while an operation writes; writes begin IMMEDIATE). Opening it
creates the tables or migrates an older file in place (``bot.agent.state._schema``). This is the
agent's private state, not the bot's Alembic-managed store.

Events are numbered per operation without gaps (1, 2, 3, ...) and are committed before anyone is
told about them, so a client that long-polls with ``after=SEQ`` and reconnects loses nothing.

Each method is one transaction: a write the disk refuses (full, a file-size limit) or a kill
leaves the state as it was before that method. A new operation is recorded whole by
``record_operation`` (the operation, its revision, its resume point and its first event), so no
agent ever finds an operation it cannot resume. Each transaction passes its moments to a
``WriteHook`` as ``agent.sqlite3/<method>`` (``bot.agent.write_hook``).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from bot.agent.state._rows import insert_event, insert_operation, insert_revision
from bot.agent.state._schema import events as _events
from bot.agent.state._schema import migrate
from bot.agent.state._schema import operations as _operations
from bot.agent.state._schema import revisions as _revisions
from bot.agent.state.resume_point import ResumePoint, Stage, Step
from bot.agent.state.views import OperationView, ProgressEvent, RevisionOutcome, RevisionView
from bot.agent.write_hook import NO_WRITE_HOOK, WriteHook, WriteMoment
from bot.db import WRITE_OPTION, make_engine
from bot.errors import StoreError
from bot.planner import StartSample
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationKind, OperationState

__all__ = ["DB_FILE", "AgentState"]

DB_FILE = "agent.sqlite3"

_OPERATION_FIELDS = frozenset(
    {"state", "finished_at", "plan", "revision", "rollback_of", "outcome", "failure"}
)
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


class AgentState:
    """The state file in ``state_dir`` (created with its tables if missing)."""

    def __init__(self, state_dir: Path, write_hook: WriteHook = NO_WRITE_HOOK) -> None:
        self.state_dir = Path(state_dir)
        self._hook = write_hook
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"agent state directory {str(self.state_dir)!r} cannot be created ({exc}); "
                "set [agent] state_dir to a writable folder"
            ) from exc
        self.path = self.state_dir / DB_FILE
        self._engine: Engine = make_engine(f"sqlite:///{self.path}", busy_timeout_s=10.0)
        self._lock = threading.Lock()
        # Notified after every committed event, so long-polls wake at once.
        self._changed = threading.Condition()
        with self._guard("create or upgrade the tables"), self._write("migrate") as conn:
            self.schema_found = migrate(conn)

    @contextlib.contextmanager
    def _write(self, method: str) -> Iterator[Connection]:
        """One write transaction (BEGIN IMMEDIATE: it queues for the lock rather than failing
        to upgrade a read lock), under the in-process lock; ``method`` names it to the hook."""
        target = f"{DB_FILE}/{method}"
        with (
            self._lock,
            self._engine.connect().execution_options(**{WRITE_OPTION: True}) as conn,
        ):
            with conn.begin():
                yield conn
                self._hook.reach(target, WriteMoment.UNCOMMITTED)
            self._hook.reach(target, WriteMoment.COMMITTED)

    def close(self) -> None:
        self._engine.dispose()

    def _guard(self, what: str) -> _Guard:
        return _Guard(what, self.path)

    # -- operations -------------------------------------------------------------------------

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
        with self._changed:
            self._changed.notify_all()
        return op_id, rev_id

    def update_operation(self, op_id: int, **fields: Any) -> None:
        unknown = set(fields) - _OPERATION_FIELDS
        if unknown:
            raise ValueError(f"not an operation field: {sorted(unknown)}")
        with self._guard("update an operation"), self._write("update_operation") as conn:
            conn.execute(_operations.update().where(_operations.c.id == op_id).values(**fields))
        with self._changed:
            self._changed.notify_all()

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

    # -- events -----------------------------------------------------------------------------

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
        with self._changed:
            self._changed.notify_all()
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

    def wait_changed(self, timeout_s: float) -> None:
        """Block until an event or an operation change is committed, or ``timeout_s`` passes."""
        with self._changed:
            self._changed.wait(max(0.0, timeout_s))

    # -- revisions --------------------------------------------------------------------------

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


class _Guard:
    """Translate SQLAlchemy's errors into StoreError naming what was being done, SQLite's own
    reason and the fix (the statement and its parameters are no help to the reader)."""

    def __init__(self, what: str, path: Path) -> None:
        self.what = what
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, SQLAlchemyError):
            raise StoreError(
                f"could not {self.what} in the agent state {str(self.path)!r}: {_reason(exc)}"
            ) from exc


# SQLite's names for a write the file system refused: no space, a quota or a file-size limit.
_NO_ROOM = frozenset(
    {"SQLITE_FULL", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_TRUNCATE",
     "SQLITE_IOERR_SHMSIZE", "SQLITE_IOERR_SHORT_READ"}
)  # fmt: skip


def _reason(exc: SQLAlchemyError) -> str:
    """Why SQLite failed, in one line, with what to do about it."""
    orig = getattr(exc, "orig", None)
    name = str(getattr(orig, "sqlite_errorname", ""))
    text = str(orig if isinstance(orig, sqlite3.Error) else exc).splitlines()[0]
    if name in _NO_ROOM:
        return (
            f"{text} ({name}): the disk holding it is full or refuses the write; free space "
            "there (or raise the agent's file-size limit), nothing was changed"
        )
    return f"{text}; check the file is writable and not held by another agent"


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
