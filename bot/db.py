"""Engines for the store and the agent's state: SQLite tuned for several writer threads, any other
SQLAlchemy URL as it is.

SQLite, per connection: WAL (readers never block the writer), foreign keys on, a busy timeout.
Python 3.11's ``sqlite3`` has no ``Connection.autocommit``, so the driver's own transaction
handling is switched off (``isolation_level = None``) and the ``begin`` hook emits ``BEGIN``
itself: ``BEGIN IMMEDIATE`` for writes, which takes the write lock up front, so two writers queue
on the busy timeout instead of failing with "database is locked" when a read lock cannot be
upgraded.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError

from bot.errors import InputError

__all__ = ["WRITE_OPTION", "is_sqlite", "make_engine", "parse_url", "safe_url"]

# Execution option a write session sets so that its SQLite transaction begins IMMEDIATE.
WRITE_OPTION = "kimi_ops_write"


def parse_url(url: str | URL) -> URL:
    """``url`` as a SQLAlchemy URL, or an :class:`InputError` naming it."""
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:  # "sqlite://:1" fails in int(), not the parser
        raise InputError(
            f"database URL {str(url)!r} is not a SQLAlchemy URL; "
            "use e.g. sqlite:///kimi-ops.db or postgresql+pg8000://user@host/db"
        ) from exc


def safe_url(url: str | URL) -> str:
    """The URL with any password replaced by stars, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def is_sqlite(url: str | URL) -> bool:
    return parse_url(url).get_backend_name() == "sqlite"


def make_engine(url: str | URL, busy_timeout_s: float = 30.0) -> Engine:
    """An engine for ``url``; SQLite connections are set up as the module docstring says."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    if parsed.database in (None, "", ":memory:"):
        raise InputError(
            f"database URL {safe_url(parsed)!r} is an in-memory SQLite database, which each "
            "connection sees empty; give a file, e.g. sqlite:///kimi-ops.db"
        )
    engine = create_engine(
        parsed, connect_args={"timeout": busy_timeout_s, "check_same_thread": False}
    )
    _configure_sqlite(engine, busy_timeout_s)
    return engine


def _configure_sqlite(engine: Engine, busy_timeout_s: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver must not open transactions itself (see the module docstring).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            # FULL (not NORMAL) so a committed audit row survives a power cut, not only a crash.
            cursor.execute("PRAGMA synchronous = FULL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")
