"""History reads: the order they promise, and the index each engine reads it from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, insert, select, text

from bot.db import make_engine
from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.store import PlanSummary, Store, upgrade_to_head
from bot.store._models import RevisionRow
from bot.store._revision_reads import history_query

T0 = datetime(2026, 2, 24, 11, 0, 0, tzinfo=UTC)
SETTINGS = HiCacheSetting(enabled=True, ratio=2.0)
PLAN = PlanSummary(22.39, 179.12, 318_549, Verdict.FITS, "fits the host's budget", {})
# Enough rows that both planners price a full sort above an index read (they pick the index
# from a few hundred rows on; below that a sort of the whole table is as cheap).
ROWS = 1_000
TIME_INDEX = "ix_revisions_proposed_at_id"


def _fill(store: Store, count: int) -> None:
    """``count`` revisions of 20 hosts a minute apart: one through the API, the rest copies of
    its row inserted in a few statements (one by one would take a minute on PostgreSQL)."""
    first = store.record_revision("kimi-01", SETTINGS, PLAN, proposed_by="U0ANA", at=T0).id
    table = RevisionRow.__table__
    with store.engine.begin() as conn:
        row = dict(conn.execute(select(table).where(table.c.id == first)).mappings().one())
        del row["id"]
        copies = [
            {**row, "host": f"kimi-{n % 20 + 1:02d}", "proposed_at": T0 + timedelta(minutes=n)}
            for n in range(1, count)
        ]
        for start in range(0, len(copies), 500):  # pg8000 takes at most 32,767 parameters
            conn.execute(insert(table).values(copies[start : start + 500]))
        # What autovacuum (PostgreSQL) or `PRAGMA optimize` (SQLite) gives a planner in service.
        conn.execute(text("ANALYZE"))


def _plan(conn: Connection, host: str | None) -> str:
    """The engine's plan for ``history(host, 10)``, one line per step."""
    sql = history_query(host, 10).compile(conn, compile_kwargs={"literal_binds": True})
    if conn.dialect.name == "sqlite":
        return "\n".join(row.detail for row in conn.execute(text(f"EXPLAIN QUERY PLAN {sql}")))
    return "\n".join(row[0] for row in conn.execute(text(f"EXPLAIN {sql}")))


def _sorts(plan: str) -> bool:
    # SQLite: "USE TEMP B-TREE FOR ORDER BY"; PostgreSQL: a "Sort" or "Incremental Sort" node.
    return "TEMP B-TREE" in plan or "Sort" in plan


def test_history_of_every_host_is_newest_first_with_ties_by_id(store: Store) -> None:
    """Without a host, history orders every host's revisions by proposal time, newest first,
    and revisions proposed at the same instant newest id first."""
    ids = [
        store.record_revision(host, SETTINGS, PLAN, proposed_by="U0ANA", at=T0 + step).id
        for host, step in [
            ("kimi-02", timedelta(minutes=2)),
            ("kimi-01", timedelta(minutes=1)),
            ("kimi-03", timedelta(minutes=2)),
            ("kimi-01", timedelta(minutes=3)),
            ("kimi-02", timedelta(0)),
        ]
    ]
    expected = [ids[3], ids[2], ids[0], ids[1], ids[4]]
    assert [r.id for r in store.history(None, 10)] == expected
    assert [r.id for r in store.history(None, 3)] == expected[:3]


def test_history_of_every_host_reads_the_time_index_backwards(db_url: str) -> None:
    """Each engine serves history without a host from ``(proposed_at, id)`` read backwards, not
    by sorting the table; without that index (as at migration 0005, which lacked it) the same
    query sorts."""
    upgrade_to_head(db_url)
    with Store(db_url) as store:
        _fill(store, ROWS)
        with store.engine.connect() as conn:
            every_host = _plan(conn, None)
    assert TIME_INDEX in every_host, every_host
    assert not _sorts(every_host), every_host

    # Dropped by hand rather than by downgrading: the query reads columns added after 0005.
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP INDEX ix_revisions_proposed_at_id"))
            conn.execute(text("ANALYZE"))
            without_index = _plan(conn, None)
    finally:
        engine.dispose()
    assert _sorts(without_index), without_index
