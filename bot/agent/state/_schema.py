"""The agent's state file: its tables, its schema version and the ordered steps that bring an
older file up to date.

The version is SQLite's ``PRAGMA user_version``. Schema 1 (the first agents) never set it, so a
file with tables and ``user_version = 0`` is schema 1; a new file is created at the latest schema.
Each step runs in one transaction with the version bump, so an interrupted upgrade leaves the
file at the version before it and is simply run again. An agent upgraded while an operation is
in flight therefore still resumes it: schema 2 turns the operation's saved cursor into a
:class:`ResumePoint`.

Steps:

1 -> 2  ``operations.cursor`` (a dict the runner read with ``.get()``) becomes
        ``operations.resume_point`` (a versioned ``ResumePoint`` as JSON).
2 -> 3  ``operations.caller``: the name of the token that started the operation (NULL for
        operations from before names, and for unnamed tokens).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.agent.state.resume_point import ResumePoint
from bot.errors import MigrationError

__all__ = ["SCHEMA_VERSION", "events", "metadata", "migrate", "operations", "revisions"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3

metadata = sa.MetaData()
operations = sa.Table(
    "operations",
    metadata,
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
    # The runner's position (ResumePoint.to_json()) for resume().
    sa.Column("resume_point", sa.JSON),
    sa.Column("caller", sa.String(64)),
)
events = sa.Table(
    "events",
    metadata,
    sa.Column("op_id", sa.Integer, sa.ForeignKey("operations.id"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("at", sa.String(40), nullable=False),
    sa.Column("phase", sa.String(32), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("progress", sa.Float, nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
)
revisions = sa.Table(
    "revisions",
    metadata,
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


def _cursor_to_resume_point(conn: Connection) -> None:
    """Schema 2: the cursor dict becomes a versioned ResumePoint (NULL where none can be made:
    a finished operation's cursor is never read again)."""
    conn.exec_driver_sql("ALTER TABLE operations RENAME COLUMN cursor TO resume_point")
    rows = conn.exec_driver_sql("SELECT id, resume_point FROM operations").fetchall()
    for op_id, raw in rows:
        value = None
        if raw is not None:
            try:
                value = json.dumps(ResumePoint.from_legacy_cursor(json.loads(raw)).to_json())
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("operation %s: cursor %s dropped in the upgrade (%r)", op_id, raw, exc)
        conn.exec_driver_sql("UPDATE operations SET resume_point = ? WHERE id = ?", (value, op_id))


def _add_caller(conn: Connection) -> None:
    """Schema 3: who started each operation, by token name (unknown for older ones)."""
    conn.exec_driver_sql("ALTER TABLE operations ADD COLUMN caller VARCHAR(64)")


#: ``STEPS[n]`` brings a schema-``n`` file to ``n + 1``.
STEPS: dict[int, Callable[[Connection], None]] = {1: _cursor_to_resume_point, 2: _add_caller}


def _version(conn: Connection) -> int:
    version = int(conn.exec_driver_sql("PRAGMA user_version").scalar() or 0)
    if version == 0:
        has_tables = conn.exec_driver_sql(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'operations'"
        ).scalar()
        return 1 if has_tables else 0
    return version


def migrate(conn: Connection) -> int:
    """Create the tables of a new file, or bring an older one to ``SCHEMA_VERSION``, within the
    caller's transaction; returns the version found. Refuses a file from a newer agent."""
    found = _version(conn)
    if found == 0:
        metadata.create_all(conn)
    elif found > SCHEMA_VERSION:
        raise MigrationError(
            f"the agent state is at schema {found}, newer than this agent's {SCHEMA_VERSION}; "
            "run the newer agent, or move the state directory aside to start afresh"
        )
    else:
        for version in range(found, SCHEMA_VERSION):
            STEPS[version](conn)
    conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return found
