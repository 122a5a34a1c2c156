"""Fixtures for the store's tests: a database URL per backend, always migrated, never create_all.

``db_url`` is parametrised over SQLite (a file in tmp_path) and PostgreSQL: a throwaway cluster
started once per test session (so once per xdist worker), listening on a Unix socket in its own
temp dir with no TCP, stopped at session end even when tests fail. initdb refuses to run as root,
so as root the cluster runs as ``postgres`` (or ``nobody``) through ``runuser``.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text

from bot.store import Store, upgrade_to_head
from bot.store._models import Base
from tests._store_template import migrated_sqlite

PG_TOOLS = ("postgres", "initdb", "pg_ctl")


class TickingClock:
    """A wall clock that moves one second per reading, so every record gets its own instant."""

    def __init__(self, start: datetime) -> None:
        self.current = start

    def now(self) -> datetime:
        self.current += timedelta(seconds=1)
        return self.current

    def monotonic(self) -> float:
        return self.current.timestamp()

    def sleep(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


@dataclass(frozen=True)
class PgCluster:
    socket_dir: Path

    def url(self, database: str) -> str:
        return f"postgresql+pg8000://postgres@/{database}?unix_sock={self.socket_dir}/.s.PGSQL.5432"

    def new_database(self) -> str:
        """A fresh, empty database in the cluster; returns its URL."""
        name = f"kimi_{uuid.uuid4().hex[:12]}"
        admin = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)


def _pg_missing() -> str | None:
    missing = [tool for tool in PG_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"no PostgreSQL server binaries on PATH ({', '.join(missing)} missing)"
    if importlib.util.find_spec("pg8000") is None:
        return "the pg8000 driver is not installed (pip install pg8000, a dev dependency)"
    return None


def _run_as() -> tuple[list[str], int, int]:
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"], entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root with neither a 'postgres' nor a 'nobody' user")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One PostgreSQL cluster for this test process (each xdist worker gets its own)."""
    reason = _pg_missing()
    if reason:
        pytest.skip(reason)
    prefix, uid, gid = _run_as()
    # Not under pytest's tmp dir: that one is private to root, and the server runs as another user.
    base = Path(tempfile.mkdtemp(prefix="kimi-ops-pg-"))
    os.chown(base, uid, gid)
    data, log = base / "data", base / "server.log"
    started = False
    try:
        subprocess.run(
            [*prefix, "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--locale=C", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        started = True
        subprocess.run(
            [*prefix, "pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
             f"-k {base} -c listen_addresses='' -c fsync=off", "start"],
            check=True, capture_output=True, timeout=90,
        )  # fmt: skip
        yield PgCluster(socket_dir=base)
    finally:
        if started:
            subprocess.run(
                [*prefix, "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a SQLite file, or a new database in the session's PostgreSQL cluster."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'kimi-ops.db'}"
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    return cluster.new_database()


def table_counts(store: Store) -> dict[str, int]:
    """Rows per table: what a refused write must leave as it was."""
    with store.engine.connect() as conn:
        return {
            table.name: conn.execute(select(func.count()).select_from(table)).scalar_one()
            for table in Base.metadata.sorted_tables
        }


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock(datetime(2026, 2, 24, 11, 0, 0, tzinfo=UTC))


@pytest.fixture
def store(db_url: str, clock: TickingClock) -> Iterator[Store]:
    """A store on a database at the newest migration: PostgreSQL's migrated through Alembic,
    SQLite's a copy of a file migrated so once per process."""
    sqlite_file = db_url.removeprefix("sqlite:///")
    if sqlite_file != db_url:
        migrated_sqlite(Path(sqlite_file))
    else:
        upgrade_to_head(db_url)
    with Store(db_url, clock=clock) as opened:
        yield opened
