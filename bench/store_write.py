"""How fast the store takes operation events on a SQLite file, and how big the file grows.

Prints ONE JSON line:
- ``batched_events_per_s``: events per second appended the way the bot does it, one transaction
  per long-poll batch (``--batch``, default 20 events);
- ``single_events_per_s``: one transaction per event (``--single-events`` of them, in a second
  file), the worst case of a bot that receives events one by one;
- ``db_bytes`` and ``bytes_per_event``: the size of the first file after ``--events`` events
  (default 100,000), WAL checkpointed into it.

    .venv/bin/python bench/store_write.py [--events N] [--batch B] [--single-events M]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from bot.store import Store, StoredEvent, upgrade_to_head
from bot.vocab import EventPhase

T0 = datetime(2026, 2, 24, 11, 18, 37, tzinfo=UTC)


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


def _fresh_store(path: Path) -> tuple[Store, int]:
    url = f"sqlite:///{path}"
    upgrade_to_head(url)
    store = Store(url)
    op = store.record_operation("kimi-01", 1, "resize").id
    return store, op


def _file_bytes(store: Store, path: Path) -> int:
    with store.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute(text("SELECT 1"))
    return path.stat().st_size


def run(events: int, batch: int, single: int) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="kimi-ops-bench-") as tmp:
        batched_path = Path(tmp) / "batched.db"
        store, op = _fresh_store(batched_path)
        empty_bytes = _file_bytes(store, batched_path)
        started = time.perf_counter()
        for first in range(1, events + 1, batch):
            store.append_events(
                op, [_event(s) for s in range(first, min(first + batch, events + 1))]
            )
        batched_s = time.perf_counter() - started
        assert store.operation_resume_point(op) == events
        db_bytes = _file_bytes(store, batched_path)
        store.close()

        single_path = Path(tmp) / "single.db"
        store, op = _fresh_store(single_path)
        started = time.perf_counter()
        for seq in range(1, single + 1):
            store.append_events(op, [_event(seq)])
        single_s = time.perf_counter() - started
        store.close()
    return {
        "bench": "store_write",
        "events": events,
        "batch": batch,
        "batched_events_per_s": round(events / batched_s, 1),
        "single_events": single,
        "single_events_per_s": round(single / single_s, 1),
        "db_bytes": db_bytes,
        "empty_db_bytes": empty_bytes,
        "bytes_per_event": round((db_bytes - empty_bytes) / events, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--single-events", type=int, default=2_000)
    args = parser.parse_args()
    if min(args.events, args.batch, args.single_events) < 1:
        parser.error("--events, --batch and --single-events must be at least 1")
    print(json.dumps(run(args.events, args.batch, args.single_events)))


if __name__ == "__main__":
    main()
