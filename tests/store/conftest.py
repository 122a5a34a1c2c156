"""Fixtures for the store's tests: a database URL per backend, always migrated, never create_all.

``db_url`` is parametrised over SQLite (a file in tmp_path) and PostgreSQL: a throwaway cluster
started once per test session (so once per xdist worker) by :mod:`bot.testing.postgres`, stopped
at session end even when tests fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bot.store import Store, upgrade_to_head
from bot.store._models import Base
from bot.testing import PgCluster, postgres_unavailable, throwaway_cluster
from tests._store_template import migrated_sqlite


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


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One PostgreSQL cluster for this test process (each xdist worker gets its own)."""
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    with throwaway_cluster() as cluster:
        yield cluster


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
