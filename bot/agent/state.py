"""The agent's own state: operations, their events and the configs this host ran (revisions).

One SQLite file, ``<state_dir>/agent.sqlite3``, through SQLAlchemy Core: tables are created on
open, the journal is WAL so the HTTP layer reads while an operation writes. This is the agent's
private state, not the bot's Alembic-managed store.

Events are numbered per operation without gaps (1, 2, 3, ...) and are committed before anyone is
told about them, so a client that long-polls with ``after=SEQ`` and reconnects loses nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from bot.agent._views import FINAL_STATES, OperationEvent, OperationView, RevisionView
from bot.errors import StoreError
from bot.planner import StartSample

__all__ = [
    "FINAL_STATES",
    "AgentState",
    "OperationEvent",
    "OperationView",
    "RevisionView",
]

DB_FILE = "agent.sqlite3"

_meta = sa.MetaData()
_operations = sa.Table(
    "operations",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("finished_at", sa.String(40)),
    sa.Column("request", sa.JSON, nullable=False),
    sa.Column("plan", sa.JSON),
    sa.Column("revision", sa.Integer),
    sa.Column("rollback_of", sa.Integer),
    sa.Column("outcome", sa.Text),
    sa.Column("failure", sa.JSON),
    # The runner's private position (server pid, log offset, parser figures) for resume().
    sa.Column("cursor", sa.JSON),
)
_events = sa.Table(
    "events",
    _meta,
    sa.Column("op_id", sa.Integer, sa.ForeignKey("operations.id"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("at", sa.String(40), nullable=False),
    sa.Column("phase", sa.String(32), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("progress", sa.Float, nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
)
_revisions = sa.Table(
    "revisions",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("argv", sa.JSON, nullable=False),
    sa.Column("hicache", sa.JSON, nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("became_ready", sa.Boolean, nullable=False, default=False),
    sa.Column("startup_s", sa.Float),
    sa.Column("device_tokens", sa.Integer),
    sa.Column("kv_bytes_per_token", sa.Float),
    sa.Column("host_gb_per_rank", sa.Float),
    sa.Column("host_tokens_per_rank", sa.Integer),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("finished_at", sa.String(40)),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("rollback_of", sa.Integer),
    sa.Column("operation_id", sa.Integer),
)

_OPERATION_FIELDS = frozenset(
    {"state", "finished_at", "plan", "revision", "rollback_of", "outcome", "failure", "cursor"}
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


def _connect_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # A cursor, not dbapi_connection.autocommit (absent on Python 3.11's sqlite3).
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class AgentState:
    """The state file in ``state_dir`` (created with its tables if missing)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"agent state directory {str(self.state_dir)!r} cannot be created ({exc}); "
                "set [agent] state_dir to a writable folder"
            ) from exc
        self.path = self.state_dir / DB_FILE
        self._engine: Engine = sa.create_engine(f"sqlite:///{self.path}")
        sa.event.listen(self._engine, "connect", _connect_pragmas)
        self._lock = threading.Lock()
        # Notified after every committed event, so long-polls wake at once.
        self._changed = threading.Condition()
        with self._guard("create the tables"):
            _meta.create_all(self._engine)

    def close(self) -> None:
        self._engine.dispose()

    def _guard(self, what: str) -> _Guard:
        return _Guard(what, self.path)

    # -- operations -------------------------------------------------------------------------

    def create_operation(
        self,
        *,
        kind: str,
        actor: str,
        created_at: str,
        request: Mapping[str, Any],
        plan: Mapping[str, Any] | None,
        revision: int | None = None,
        rollback_of: int | None = None,
        state: str = "running",
    ) -> int:
        with self._guard("record an operation"), self._lock, self._engine.begin() as conn:
            result = conn.execute(
                _operations.insert().values(
                    kind=kind,
                    state=state,
                    actor=actor,
                    created_at=created_at,
                    request=dict(request),
                    plan=None if plan is None else dict(plan),
                    revision=revision,
                    rollback_of=rollback_of,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])

    def update_operation(self, op_id: int, **fields: Any) -> None:
        unknown = set(fields) - _OPERATION_FIELDS
        if unknown:
            raise ValueError(f"not an operation field: {sorted(unknown)}")
        with self._guard("update an operation"), self._lock, self._engine.begin() as conn:
            conn.execute(_operations.update().where(_operations.c.id == op_id).values(**fields))
        with self._changed:
            self._changed.notify_all()

    def operation(self, op_id: int) -> OperationView | None:
        with self._guard("read an operation"), self._engine.connect() as conn:
            row = conn.execute(sa.select(_operations).where(_operations.c.id == op_id)).first()
        return None if row is None else _operation_view(row._mapping)

    def cursor(self, op_id: int) -> dict[str, Any]:
        """The runner's saved position for ``op_id`` (empty if none)."""
        with self._guard("read an operation"), self._engine.connect() as conn:
            value = conn.execute(
                sa.select(_operations.c.cursor).where(_operations.c.id == op_id)
            ).scalar()
        return dict(value) if isinstance(value, dict) else {}

    def operations(self, limit: int = 20) -> list[OperationView]:
        """The most recent operations first."""
        query = sa.select(_operations).order_by(_operations.c.id.desc()).limit(max(0, limit))
        with self._guard("list operations"), self._engine.connect() as conn:
            return [_operation_view(row._mapping) for row in conn.execute(query)]

    def unfinished_operations(self) -> list[OperationView]:
        query = (
            sa.select(_operations)
            .where(_operations.c.state.not_in(sorted(FINAL_STATES)))
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
        phase: str,
        message: str,
        progress: float,
        data: Mapping[str, Any] | None = None,
        state: str | None = None,
    ) -> OperationEvent:
        """Commit the next event of ``op_id`` (and, with ``state``, the operation's new state in
        the same transaction), then wake the waiters."""
        payload = json.loads(json.dumps(dict(data or {}), default=str))
        with self._guard("record an event"), self._lock, self._engine.begin() as conn:
            last = conn.execute(
                sa.select(sa.func.max(_events.c.seq)).where(_events.c.op_id == op_id)
            ).scalar()
            seq = int(last or 0) + 1
            conn.execute(
                _events.insert().values(
                    op_id=op_id,
                    seq=seq,
                    at=at,
                    phase=phase,
                    message=message,
                    progress=progress,
                    data=payload,
                )
            )
            if state is not None:
                conn.execute(
                    _operations.update().where(_operations.c.id == op_id).values(state=state)
                )
        with self._changed:
            self._changed.notify_all()
        return OperationEvent(seq, at, phase, message, progress, payload)

    def events(self, op_id: int, after: int = 0) -> list[OperationEvent]:
        query = (
            sa.select(_events)
            .where(_events.c.op_id == op_id, _events.c.seq > after)
            .order_by(_events.c.seq)
        )
        with self._guard("read events"), self._engine.connect() as conn:
            return [
                OperationEvent(
                    seq=row.seq,
                    at=row.at,
                    phase=row.phase,
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
        outcome: str = "pending",
        became_ready: bool = False,
        rollback_of: int | None = None,
        operation_id: int | None = None,
        device_tokens: int | None = None,
        kv_bytes_per_token: float | None = None,
    ) -> int:
        with self._guard("record a revision"), self._lock, self._engine.begin() as conn:
            result = conn.execute(
                _revisions.insert().values(
                    argv=list(argv),
                    hicache=dict(hicache),
                    outcome=outcome,
                    became_ready=became_ready,
                    created_at=created_at,
                    actor=actor,
                    kind=kind,
                    rollback_of=rollback_of,
                    operation_id=operation_id,
                    device_tokens=device_tokens,
                    kv_bytes_per_token=kv_bytes_per_token,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])

    def update_revision(self, rev_id: int, **fields: Any) -> None:
        unknown = set(fields) - _REVISION_FIELDS
        if unknown:
            raise ValueError(f"not a revision field: {sorted(unknown)}")
        with self._guard("update a revision"), self._lock, self._engine.begin() as conn:
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

    def last_ready_revision(self, exclude: int | None = None) -> RevisionView | None:
        """The newest revision that became ready (other than ``exclude``)."""
        for revision in self.revisions():
            if revision.became_ready and revision.id != exclude:
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
            if r.device_tokens is not None and r.outcome != "pending":
                return (r.device_tokens, r.kv_bytes_per_token, r.host_tokens_per_rank,
                        r.host_gb_per_rank)  # fmt: skip
        return None


class _Guard:
    """Translate SQLAlchemy's errors into StoreError naming what was being done."""

    def __init__(self, what: str, path: Path) -> None:
        self.what = what
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, SQLAlchemyError):
            raise StoreError(
                f"could not {self.what} in the agent state {str(self.path)!r}: {exc}; check the "
                "file is writable and not held by another agent"
            ) from exc


def _operation_view(row: sa.RowMapping) -> OperationView:
    return OperationView(
        id=row["id"],
        kind=row["kind"],
        state=row["state"],
        actor=row["actor"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        request=dict(row["request"] or {}),
        plan=row["plan"],
        revision=row["revision"],
        rollback_of=row["rollback_of"],
        outcome=row["outcome"],
        failure=row["failure"],
    )


def _revision_view(row: sa.RowMapping) -> RevisionView:
    return RevisionView(
        id=row["id"],
        argv=tuple(row["argv"]),
        hicache=dict(row["hicache"] or {}),
        outcome=row["outcome"],
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
