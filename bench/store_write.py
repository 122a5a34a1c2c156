"""How fast the store takes operation events, and how fast ``history`` reads at 100,000
revisions, on SQLite and on PostgreSQL.

For each backend (SQLite: a file in a temp dir; PostgreSQL: a throwaway cluster started with
``initdb``/``pg_ctl`` by :mod:`bot.testing.postgres`, when one can run here; else the line says
``"postgresql": "not available: <reason>"``), on a database
migrated by Alembic:

- ``batched_events_per_s``: events appended the way the bot does, one transaction per long-poll
  batch (``--batch``, default 20 events), ``--events`` of them (20,000: a rate, which a longer
  run does not change, and PostgreSQL through pg8000 takes a few hundred a second here);
- ``single_events_per_s``: one transaction per event (``--single-events``, 1,000): the worst
  case of a bot that receives events one by one;
- ``history_ms``: p50 and p95 over 50 calls of ``Store.history`` (what ``/kimi history`` and
  ``kimi-ops history`` read, newest 10) for one host and for every host, with ``--revisions``
  (100,000) revisions of 50 hosts in the table. One revision is recorded through the store's
  API; the rest are copies of its row with other hosts and times, inserted 500 to a
  statement (recording 100,000 one by one would take minutes and measure the writes again).
- SQLite only: ``db_bytes`` and ``bytes_per_event`` after the batched events, WAL checkpointed.

Target: ``history`` under 50 ms (p95, both queries, each backend). Events/s has no target of
its own: it is kept to watch the trend.

    .venv/bin/python bench/store_write.py [--events N] [--batch B] [--single-events M]
                                          [--revisions R] [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _report import BenchLine, percentile
from sqlalchemy import insert, select, text

from bot.hicache import HiCacheSetting
from bot.store import PlanSummary, Store, StoredEvent, upgrade_to_head
from bot.store._models import RevisionRow
from bot.testing import postgres_unavailable, throwaway_cluster
from bot.vocab import EventPhase

T0 = datetime(2026, 2, 24, 11, 18, 37, tzinfo=UTC)
HOSTS = 50
HISTORY_LIMIT = 10  # the chat's default
HISTORY_CALLS = 50
TARGET_MS = 50.0
# 500 rows of about 30 columns stay under pg8000's 32,767 parameters per statement.
ROWS_PER_INSERT = 500


def _event(seq: int) -> StoredEvent:
    # Shaped like the agent's loading-weights events: a phase, a line, a fraction, a little data.
    shard = seq % 64 + 1
    return StoredEvent(
        seq=seq,
        at=T0 + timedelta(milliseconds=250 * seq),
        phase=EventPhase.LOAD_WEIGHTS,
        message=f"loading weights {shard}/64 shards",
        progress=shard / 64,
        data={"shard": shard, "shards": 64, "rank": seq % 8},
    )


def _sqlite_bytes(store: Store, path: Path) -> int:
    with store.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute(text("SELECT 1"))
    return path.stat().st_size


def events_per_s(url: str, events: int, batch: int) -> float:
    with Store(url) as store:
        op = store.record_operation("kimi-01", 1, "resize").id
        started = time.perf_counter()
        for first in range(1, events + 1, batch):
            last = min(first + batch, events + 1)
            store.append_events(op, [_event(s) for s in range(first, last)])
        took = time.perf_counter() - started
        if store.operation_resume_point(op) != events:
            raise SystemExit(f"the store kept {store.operation_resume_point(op)} of {events}")
    return events / took


def fill_revisions(store: Store, count: int) -> None:
    """``count`` revisions of ``HOSTS`` hosts, one a minute, the first through the API."""
    settings = HiCacheSetting(True, 2.0, None, "write_through", "kernel")
    plan = PlanSummary(22.39, 179.12, 318_549, "fits", "fits the host's budget", {"ranks": 8})
    first = store.record_revision("kimi-01", settings, plan, proposed_by="U0BENCH", at=T0).id
    table = RevisionRow.__table__
    with store.engine.begin() as conn:
        template = dict(conn.execute(select(table).where(table.c.id == first)).mappings().one())
        del template["id"]
        for start in range(1, count, ROWS_PER_INSERT):
            rows = [
                {**template, "host": f"kimi-{n % HOSTS + 1:02d}",
                 "proposed_at": T0 + timedelta(minutes=n)}
                for n in range(start, min(start + ROWS_PER_INSERT, count))
            ]  # fmt: skip
            # One multi-row VALUES statement: pg8000's executemany would send a row at a time.
            conn.execute(insert(table).values(rows))


def history_ms(store: Store, host: str | None) -> dict[str, float]:
    took = []
    for _ in range(HISTORY_CALLS):
        began = time.perf_counter()
        records = store.history(host, HISTORY_LIMIT)
        took.append((time.perf_counter() - began) * 1000)
        if len(records) != HISTORY_LIMIT:
            raise SystemExit(f"history gave {len(records)} revisions, not {HISTORY_LIMIT}")
    return {"p50": round(percentile(took, 0.5), 2), "p95": round(percentile(took, 0.95), 2)}


def one_backend(
    make_url: Any, args: argparse.Namespace, line: BenchLine, name: str
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    url = make_url("batched")
    upgrade_to_head(url)
    figures["batched_events_per_s"] = round(events_per_s(url, args.events, args.batch), 1)
    single = make_url("single")
    upgrade_to_head(single)
    figures["single_events_per_s"] = round(events_per_s(single, args.single_events, 1), 1)
    revisions = make_url("revisions")
    upgrade_to_head(revisions)
    with Store(revisions) as store:
        fill_revisions(store, args.revisions)
        store.history("kimi-02", HISTORY_LIMIT)  # warm the connection pool and the cache
        figures["history_ms"] = {
            "one_host": history_ms(store, "kimi-02"),
            "all_hosts": history_ms(store, None),
        }
    for which, found in figures["history_ms"].items():
        line.check(f"{name}: history of {which.replace('_', ' ')} at {args.revisions:,} "
                   "revisions, p95", found["p95"], below=TARGET_MS, unit="ms")  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--single-events", type=int, default=1_000)
    parser.add_argument("--revisions", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="500 events and revisions")
    args = parser.parse_args()
    if args.quick:
        args.events, args.single_events, args.revisions = 500, 50, 500
    if min(args.events, args.batch, args.single_events) < 1 or args.revisions < HISTORY_LIMIT:
        parser.error(f"--events, --batch and --single-events must be at least 1, and "
                     f"--revisions at least {HISTORY_LIMIT}")  # fmt: skip
    line = BenchLine("store_write")
    line.figures.update(events=args.events, batch=args.batch, revisions=args.revisions)
    with tempfile.TemporaryDirectory(prefix="kimi-ops-bench-") as tmp:
        files = Path(tmp)
        line.figures["sqlite"] = one_backend(
            lambda name: f"sqlite:///{files / name}.db", args, line, "SQLite"
        )
        with Store(f"sqlite:///{files / 'batched'}.db") as store:
            db_bytes = _sqlite_bytes(store, files / "batched.db")
        line.figures["sqlite"]["db_bytes"] = db_bytes
        line.figures["sqlite"]["bytes_per_event"] = round(db_bytes / args.events, 1)
    reason = postgres_unavailable()
    if reason is not None:
        line.figures["postgresql"] = f"not available: {reason}"
        line.emit()
        return
    try:
        with throwaway_cluster() as cluster:
            line.figures["postgresql"] = one_backend(
                lambda _name: cluster.new_database(), args, line, "PostgreSQL"
            )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        stderr = exc.stderr.decode(errors="replace").strip() if exc.stderr else ""
        line.figures["postgresql"] = f"not available: {exc.cmd[-1]} failed: {stderr[-200:]}"
    line.emit()


if __name__ == "__main__":
    main()
