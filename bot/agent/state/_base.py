"""The agent's state file and what every part of :class:`~bot.agent.state.AgentState` shares:
opening it (created or migrated in place), one write transaction per method under an in-process
lock, the wake-up of long-polls after a commit, and SQLite's errors as :class:`StoreError`."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from bot.agent.state._schema import migrate
from bot.agent.write_hook import NO_WRITE_HOOK, WriteHook, WriteMoment
from bot.db import WRITE_OPTION, make_engine
from bot.errors import StoreError

__all__ = ["DB_FILE", "StateBase"]

DB_FILE = "agent.sqlite3"


class StateBase:
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

    def _notify_changed(self) -> None:
        """Wake the long-polls: an event or an operation change was just committed."""
        with self._changed:
            self._changed.notify_all()

    def wait_changed(self, timeout_s: float) -> bool:
        """Block until an event or an operation change is committed (True), or ``timeout_s``
        passes (False)."""
        with self._changed:
            return self._changed.wait(max(0.0, timeout_s))


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
