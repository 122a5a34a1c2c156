"""Engine set-up under load: several threads writing one SQLite file, and rollback on error."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from bot.db import make_engine
from bot.errors import InputError, StoreError
from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.store import (
    CapacitySample,
    PlanSummary,
    Store,
    StoredEvent,
    upgrade_to_head,
)
from bot.vocab import EventPhase

THREADS = 8
WRITES = 500
T0 = datetime(2026, 2, 24, 12, tzinfo=UTC)


@pytest.mark.slow
def test_eight_threads_writing_one_sqlite_file_lose_nothing(tmp_path: Path) -> None:
    """A scheduler thread and seven command threads, 500 writes each: no lock error, no lost row."""
    url = f"sqlite:///{tmp_path / 'kimi-ops.db'}"
    upgrade_to_head(url)
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)
    with Store(url) as store:
        ops = [store.record_operation("kimi-01", n, "resize").id for n in range(1, 4)]

        def scheduler() -> None:
            for i in range(WRITES):
                store.add_capacity_sample(
                    CapacitySample("kimi-01", T0 + timedelta(seconds=i), device_tokens=i)
                )

        def events(op_id: int) -> None:
            for seq in range(1, WRITES + 1):
                store.append_events(op_id, [StoredEvent(seq, T0, EventPhase.LOAD_WEIGHTS, "x")])

        def refusals(worker: int) -> None:
            for i in range(WRITES):
                store.record_refusal(f"U{worker}", f"apply {i}", "not allowed", host="kimi-01")

        def reads_then_writes(worker: int) -> None:
            # Reads between writes: a reader must never turn into a failing writer.
            for i in range(WRITES // 2):
                store.history("kimi-01", 5)
                store.record_revision(
                    "kimi-01", HiCacheSetting(True, ratio=float(i % 8 + 1)),
                    PlanSummary(1.0, 8.0, i, "fits", f"worker {worker}"), proposed_by="U1",
                )  # fmt: skip
                store.record_refusal(f"R{worker}", f"resize {i}", "ratio does not fit")

        jobs = [scheduler] + [lambda op=op: events(op) for op in ops]
        jobs += [lambda w=w: refusals(w) for w in (4, 5)] + [
            lambda w=w: reads_then_writes(w) for w in (6, 7)
        ]
        assert len(jobs) == THREADS

        def guarded(job: object) -> None:
            start.wait(timeout=30)
            try:
                job()  # type: ignore[operator]
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=guarded, args=(job,)) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=150)
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []

        assert len(store.capacity_samples("kimi-01", T0)) == WRITES
        for op in ops:
            assert [e.seq for e in store.operation_events(op)] == list(range(1, WRITES + 1))
            assert store.operation_resume_point(op) == WRITES
        # Two refusal threads, two threads that each also record half their writes as revisions.
        assert len(store.refusals(limit=10 * WRITES)) == 2 * WRITES + 2 * (WRITES // 2)
        assert len(store.history("kimi-01", 10 * WRITES)) == 2 * (WRITES // 2)


def test_a_failed_batch_is_rolled_back_whole(tmp_path: Path) -> None:
    """A batch with one bad event stores none of its events and leaves the resume point alone."""
    url = f"sqlite:///{tmp_path / 'kimi-ops.db'}"
    upgrade_to_head(url)
    with Store(url) as store:
        op = store.record_operation("kimi-01", 1, "restart").id
        good = [StoredEvent(seq, T0, EventPhase.STARTING, "ok") for seq in (1, 2)]
        bad = StoredEvent(3, datetime(2026, 2, 24), EventPhase.STARTING, "naive time")
        with pytest.raises(InputError, match="event 3 time"):
            store.append_events(op, [*good, bad])
        assert store.operation_events(op) == []
        assert store.operation_resume_point(op) == 0


def test_a_database_error_is_a_store_error_and_rolls_the_write_back(tmp_path: Path) -> None:
    """A table the database lacks makes a write a StoreError saying the database refused it,
    with SQLite's reason, its revision row rolled back; and a read one saying it failed."""
    url = f"sqlite:///{tmp_path / 'kimi-ops.db'}"
    upgrade_to_head(url)
    with Store(url) as store:
        with store.engine.begin() as conn:
            conn.execute(text("DROP TABLE proposals"))
        with pytest.raises(StoreError) as refused:
            store.record_proposal(
                "kimi-01", HiCacheSetting(True, ratio=2.0),
                PlanSummary(1.0, 8.0, 1, Verdict.FITS, ""), proposed_by="U1", channel="C1",
                expires_at=T0 + timedelta(minutes=15), fingerprint="f", requested={}, at=T0,
            )  # fmt: skip
        assert str(refused.value) == (
            f"the database {url} refused to record a proposal: no such table: proposals"
        )
        assert store.history("kimi-01") == []
        with pytest.raises(StoreError) as failed:
            store.proposal(1)
        assert str(failed.value) == (
            f"the database {url} failed to read a proposal: no such table: proposals"
        )


def test_in_memory_sqlite_is_refused() -> None:
    """An in-memory URL would give each pooled connection its own empty database: refused."""
    with pytest.raises(InputError, match="in-memory SQLite"):
        make_engine("sqlite://")


def test_a_url_that_is_not_one_is_refused() -> None:
    """A malformed URL is named in the error, with examples of good ones."""
    with pytest.raises(InputError, match="'not a url' is not a SQLAlchemy URL"):
        make_engine("not a url")
