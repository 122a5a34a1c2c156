"""The Store's repository functions, each written and read back on a migrated database."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, ProgrammingError

from bot.errors import InputError, MigrationError, NotFound
from bot.hicache import HiCacheSetting
from bot.planner import StartSample, Verdict
from bot.store import (
    CapacitySample,
    FleetReplicaProposal,
    PlanSummary,
    RevisionKind,
    RevisionOutcome,
    Store,
    StoredEvent,
)
from bot.vocab import EventPhase, FailureKind, OperationKind, OperationState
from tests.store.conftest import TickingClock, table_counts

# Kimi-K2.5 (MLA, 61 layers, bf16) on 8 ranks; docs/sglang.md#host-pool-sizing gives
# size_per_token = 576 * 2 * 61 = 70,272 B, and --hicache-size 48 gives
# int(48e9 // 70272) // 1 + 1 = 683,061 tokens per rank (the 0.5.23 log line says 683061).
BYTES_PER_TOKEN = 576 * 2 * 61
HOST_TOKENS = int(48e9 // BYTES_PER_TOKEN) + 1
PER_RANK_GB = HOST_TOKENS * BYTES_PER_TOKEN / 1e9
RANKS = 8
COMMAND = (
    "python", "-m", "sglang.launch_server", "--model-path", "/models/kimi-k2.5", "--tp-size", "8",
    "--enable-hierarchical-cache", "--hicache-size", "48",
)  # fmt: skip
SIZE_48 = HiCacheSetting(
    enabled=True,
    ratio=2.0,
    size_gb=48,
    write_policy="write_through",
    io_backend="kernel",
)
PLAN_48 = PlanSummary(
    per_rank_gb=PER_RANK_GB,
    total_gb=PER_RANK_GB * RANKS,
    per_rank_tokens=HOST_TOKENS,
    verdict=Verdict.FITS,
    reason="8 x 48.00 GB = 384.00 GB fits in 449 GB available - 10 GiB reserve - 40 GB headroom",
    detail={"ranks": RANKS, "per_rank_bytes": HOST_TOKENS * BYTES_PER_TOKEN, "notes": ["a", "b"]},
)
RATIO_4 = HiCacheSetting(enabled=True, ratio=4.0)
RATIO_4_COMMAND = (*COMMAND[:-2], "--hicache-ratio", "4")


def _propose(
    store: Store,
    host: str = "kimi-01",
    settings: HiCacheSetting = SIZE_48,
    command_line: tuple[str, ...] = COMMAND,
) -> int:
    proposal = store.record_proposal(
        host,
        settings,
        PLAN_48,
        command_line=command_line,
        proposed_by="U0BEN",
        channel="C0OPS",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC),
        fingerprint="sha256:feed",
        requested={"kind": "size", "value": 48},
    )
    return proposal.revision_id


def _ready(store: Store, host: str = "kimi-01", seconds: float = 640.0) -> int:
    revision_id = _propose(store, host)
    store.record_apply(revision_id, "U0ANA")
    store.record_outcome(revision_id, "ready", startup_seconds=seconds)
    return revision_id


def test_proposal_and_revision_read_back_exactly(store: Store, clock: TickingClock) -> None:
    """A proposal and its revision come back with every field as written, instants in UTC."""
    expires = datetime(2026, 2, 24, 13, 15, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    proposal = store.record_proposal(
        "kimi-01",
        SIZE_48,
        PLAN_48,
        proposed_by="U0BEN",
        channel="C0OPS",
        expires_at=expires,
        fingerprint="sha256:feed",
        requested={"kind": "size", "value": 48, "raw": "resize size 48"},
        command_line=COMMAND,
    )
    assert proposal.expires_at == expires
    assert proposal.expires_at.tzinfo == UTC
    assert proposal.requested == {"kind": "size", "value": 48, "raw": "resize size 48"}
    assert proposal.message_ts is None
    attached = store.attach_proposal_message(proposal.id, "1771930800.000100")
    assert store.proposal_by_message("C0OPS", "1771930800.000100") == attached
    assert store.proposal_for_revision(proposal.revision_id) == attached

    revision = store.revision(proposal.revision_id)
    assert revision.host == "kimi-01"
    assert revision.settings == SIZE_48
    assert revision.command_line == COMMAND
    assert (revision.agent_revision_id, revision.agent_returned_to) == (None, None)
    assert revision.plan == PLAN_48
    assert revision.plan.per_rank_gb == HOST_TOKENS * BYTES_PER_TOKEN / 1e9
    assert revision.proposed_by == "U0BEN"
    assert revision.proposed_at == datetime(2026, 2, 24, 11, 0, 1, tzinfo=UTC)
    assert revision.outcome is RevisionOutcome.PROPOSED
    assert (revision.applied_by, revision.applied_at, revision.finished_at) == (None, None, None)


def test_apply_then_ready_keeps_who_when_and_figures(store: Store) -> None:
    """Apply then ready records the applier, the times and the capacity the start reached."""
    revision_id = _propose(store)
    applied_at = datetime(2026, 2, 24, 11, 18, 37, tzinfo=UTC)
    applied = store.record_apply(revision_id, "U0ANA", at=applied_at)
    assert (applied.outcome, applied.applied_by, applied.applied_at) == (
        RevisionOutcome.APPLIED, "U0ANA", applied_at,
    )  # fmt: skip
    ready_at = applied_at + timedelta(minutes=11, seconds=2)
    ready = store.record_outcome(
        revision_id,
        RevisionOutcome.READY,
        at=ready_at,
        startup_seconds=662.25,
        device_tokens=231_120,
        host_gb_per_rank=PER_RANK_GB,
        host_tokens_per_rank=HOST_TOKENS,
    )
    assert ready == store.revision(revision_id)
    assert ready.outcome is RevisionOutcome.READY
    assert ready.finished_at == ready_at
    assert (ready.startup_seconds, ready.device_tokens) == (662.25, 231_120)
    assert (ready.host_gb_per_rank, ready.host_tokens_per_rank) == (PER_RANK_GB, HOST_TOKENS)
    assert ready.proposed_by == "U0BEN"


def test_failure_then_automatic_rollback(store: Store) -> None:
    """A failed start keeps its log lines; the rollback copies the last ready config and links."""
    good = _ready(store)
    bad = _propose(store, settings=RATIO_4, command_line=RATIO_4_COMMAND)
    store.record_apply(bad, "U0ANA")
    lines = [
        "[2026-02-24 11:29:03 TP3] Scheduler hit an exception: Traceback ...",
        "ValueError: Not enough host memory available. Requesting 300.00 GB but only have "
        "437.12 GB free. Please reduce the size of the hierarchical cache.",
    ]
    failed = store.record_outcome(bad, "failed", failure_kind="host_memory", failure_lines=lines)
    assert (failed.failure_kind, failed.failure_lines) == (FailureKind.HOST_MEMORY, tuple(lines))

    rollback = store.record_rollback(bad, good)
    assert rollback.outcome is RevisionOutcome.APPLIED
    assert (rollback.rollback_of, rollback.returned_to) == (bad, good)
    assert rollback.settings == SIZE_48
    assert rollback.command_line == COMMAND
    assert rollback.plan == PLAN_48
    assert (rollback.proposed_by, rollback.applied_by) == (None, None)
    undone = store.revision(bad)
    assert undone.outcome is RevisionOutcome.ROLLED_BACK
    assert undone.finished_at == failed.finished_at
    assert undone.failure_lines == tuple(lines)
    store.record_outcome(rollback.id, "ready", startup_seconds=600.0)
    assert store.last_ready_revision("kimi-01") == store.revision(rollback.id)


def test_agent_ids_and_command_line_link_revisions_to_the_agent(store: Store) -> None:
    """The agent's revision ids and argv are kept; a rollback carries the agent id it returned
    to; the store finds a revision by the agent's id on its host only."""
    good = _ready(store)
    assert store.record_agent_revision(good, 2, COMMAND).agent_revision_id == 2
    bad = _propose(store, settings=RATIO_4, command_line=())
    store.record_apply(bad, "U0ANA")
    linked = store.record_agent_revision(bad, 3, RATIO_4_COMMAND)
    assert (linked.agent_revision_id, linked.command_line) == (3, RATIO_4_COMMAND)
    assert store.record_agent_revision(bad, 3, RATIO_4_COMMAND) == linked
    with pytest.raises(InputError, match="already the agent's revision 3, not 5"):
        store.record_agent_revision(bad, 5, RATIO_4_COMMAND)
    store.record_outcome(bad, "failed", failure_kind=FailureKind.HOST_MEMORY)
    rollback = store.record_rollback(bad, good, agent_revision_id=4)
    assert (rollback.agent_revision_id, rollback.agent_returned_to) == (4, 2)
    assert rollback.command_line == COMMAND
    assert store.revision_by_agent_id("kimi-01", 3) == store.revision(bad)
    assert store.revision_by_agent_id("kimi-02", 3) is None


def test_recording_the_same_outcome_twice_keeps_the_first(store: Store) -> None:
    """A resumed watcher re-recording 'ready' changes nothing already on record."""
    revision_id = _propose(store)
    store.record_apply(revision_id, "U0ANA")
    assert store.record_apply(revision_id, "U0OTHER").applied_by == "U0ANA"
    first = store.record_outcome(revision_id, "ready", startup_seconds=640.0)
    again = store.record_outcome(revision_id, "ready", startup_seconds=999.0)
    assert again == first


def test_rolling_back_an_applied_revision_finishes_it(store: Store) -> None:
    """An applied revision the agent rolled back before any outcome gets its finish time."""
    revision_id = _propose(store)
    store.record_apply(revision_id, "U0ANA")
    at = datetime(2026, 2, 24, 12, 0, tzinfo=UTC)
    undone = store.record_outcome(revision_id, RevisionOutcome.ROLLED_BACK, at=at)
    assert (undone.outcome, undone.finished_at) == (RevisionOutcome.ROLLED_BACK, at)


def test_impossible_transition_is_refused_and_changes_nothing(store: Store) -> None:
    """A ready revision cannot be cancelled: the error says what it can become."""
    revision_id = _ready(store)
    before = store.revision(revision_id)
    with pytest.raises(InputError, match=r"'ready'; it cannot become 'cancelled'.*rolled_back"):
        store.record_outcome(revision_id, "cancelled")
    assert store.revision(revision_id) == before


def test_history_is_newest_first_per_host_and_limited(store: Store) -> None:
    """history() lists a host's revisions newest first, at most ``limit`` of them."""
    first = _propose(store, "kimi-01")
    _propose(store, "kimi-02")
    second = _propose(store, "kimi-01")
    third = _propose(store, "kimi-01")
    assert [r.id for r in store.history("kimi-01", 10)] == [third, second, first]
    assert [r.id for r in store.history("kimi-01", 2)] == [third, second]
    assert len(store.history(None, 10)) == 4
    assert store.history("nowhere", 5) == []


def test_startup_durations_for_eta(store: Store) -> None:
    """Starts that became ready give the planner's samples: their seconds with the host GB per
    rank they pinned (the planned size when the log gave none); failed starts give none."""
    planned_only = _ready(store, seconds=600.0)
    reached = _propose(store)
    store.record_apply(reached, "U0ANA")
    store.record_outcome(reached, "ready", startup_seconds=900.5, host_gb_per_rank=44.77)
    failed = _propose(store)
    store.record_apply(failed, "U0ANA")
    store.record_outcome(failed, "failed", startup_seconds=120.0, failure_kind="host_memory")
    assert store.startup_durations("kimi-01") == [
        StartSample(seconds=900.5, host_gb_per_rank=44.77),
        StartSample(seconds=600.0, host_gb_per_rank=PER_RANK_GB),
    ]
    assert reached > planned_only
    assert store.last_ready_revision("kimi-02") is None


def test_operation_events_are_idempotent_and_resumable(store: Store) -> None:
    """Replayed events are stored once; the resume point is the highest seq received."""
    revision_id = _propose(store)
    op = store.record_operation(
        "kimi-01", 7, OperationKind.RESIZE, channel="C0OPS", revision_id=revision_id
    )
    assert op.last_event_seq == 0
    assert store.unfinished_operations() == [op]
    at = datetime(2026, 2, 24, 11, 20, tzinfo=UTC)
    batch = [
        StoredEvent(seq, at + timedelta(seconds=seq), EventPhase.LOAD_WEIGHTS,
                       f"loading weights {seq}/64 shards", progress=seq / 64,
                       data={"shard": seq, "shards": 64})
        for seq in range(1, 21)
    ]  # fmt: skip
    assert store.append_events(op.id, batch) == 20
    assert store.append_events(op.id, batch) == 0
    assert store.append_events(op.id, [*batch[15:], *_more(at, 21, 25)]) == 5
    assert store.operation_resume_point(op.id) == 25
    events = store.operation_events(op.id)
    assert [e.seq for e in events] == list(range(1, 26))
    assert events[16] == batch[16]
    assert [e.seq for e in store.operation_events(op.id, after_seq=23)] == [24, 25]

    updated = store.update_operation(op.id, message_ts="1771931000.000200", state="stalled")
    assert (updated.message_ts, updated.state) == ("1771931000.000200", OperationState.STALLED)
    done = store.finish_operation(op.id, "ready", at=at + timedelta(minutes=11))
    assert (done.state, done.finished_at) == (OperationState.READY, at + timedelta(minutes=11))
    assert store.finish_operation(op.id, "failed") == done
    assert store.unfinished_operations() == []
    assert store.operation_by_agent_id("kimi-01", 7) == done


def _more(at: datetime, first: int, last: int) -> list[StoredEvent]:
    return [StoredEvent(s, at, EventPhase.KV_POOL, "KV pool") for s in range(first, last + 1)]


def test_recording_an_operation_twice_returns_the_first(store: Store) -> None:
    """A restarted bot recording the same agent operation gets the stored row back."""
    first = store.record_operation("kimi-01", 1, "restart")
    assert store.record_operation("kimi-01", 1, "restart", state="stalled") == first
    assert store.record_operation("kimi-02", 1, "restart").id != first.id


def test_refusals_record_who_what_why(store: Store) -> None:
    """Refusals, including an unauthorized user's, are kept with the revision they concern."""
    revision_id = _propose(store)
    denied = store.record_refusal(
        "U0MALLORY", "apply proposal 1", "U0MALLORY may not apply changes on kimi-01",
        host="kimi-01", channel="C0OPS", revision_id=revision_id,
    )  # fmt: skip
    plan = store.record_refusal("U0BEN", "resize size 300", "8 x 300 GB = 2400 GB > 399 GB")
    assert store.refusals() == [plan, denied]
    assert store.refusals(user_id="U0MALLORY") == [denied]
    assert denied.revision_id == revision_id
    assert store.refusals(host="kimi-01")[0].reason == "U0MALLORY may not apply changes on kimi-01"


def test_capacity_samples_time_range(store: Store) -> None:
    """Samples of one host come back oldest first within [since, until), every figure intact."""
    t0 = datetime(2026, 2, 24, 12, tzinfo=UTC)
    samples = [
        CapacitySample(
            "kimi-01", t0 + timedelta(minutes=5 * i), ram_total_bytes=449 * 10**9,
            ram_available_bytes=80 * 10**9 + i, hicache_host_bytes=RANKS * HOST_TOKENS *
            BYTES_PER_TOKEN, device_tokens=231_120, host_tokens=HOST_TOKENS, token_usage=0.97,
            queued_requests=80, running_requests=50, cache_hit_rate=0.125,
            gpus=({"index": 0, "used_bytes": 94_510_000_000},),
        )
        for i in range(4)
    ]  # fmt: skip
    for sample in samples:
        store.add_capacity_sample(sample)
    store.add_capacity_sample(CapacitySample("kimi-02", t0))
    got = store.capacity_samples("kimi-01", t0 + timedelta(minutes=5), t0 + timedelta(minutes=15))
    assert got == samples[1:3]
    assert store.capacity_samples("kimi-02", t0) == [CapacitySample("kimi-02", t0)]


def test_report_schedules_crud(store: Store) -> None:
    """Schedules are created, found due, moved, disabled and deleted."""
    t0 = datetime(2026, 2, 25, 9, tzinfo=UTC)
    daily = store.add_schedule("C0OPS", "daily 09:00", t0, "U0ANA", host="kimi-01")
    hourly = store.add_schedule("C0OTHER", "every 1h", t0 + timedelta(minutes=30), "U0BEN")
    assert store.due_schedules(t0) == [daily]
    moved = store.update_schedule(daily.id, next_run_at=t0 + timedelta(days=1))
    assert store.due_schedules(t0 + timedelta(hours=1)) == [hourly]
    off = store.update_schedule(hourly.id, enabled=False)
    assert store.schedules(enabled_only=True) == [moved]
    assert store.schedules(channel="C0OTHER") == [off]
    store.delete_schedule(daily.id)
    with pytest.raises(NotFound):
        store.schedule(daily.id)


def test_deleting_an_operation_deletes_its_events(store: Store) -> None:
    """ON DELETE CASCADE on events is live, so foreign keys are enforced on app connections."""
    op = store.record_operation("kimi-01", 1, "restart")
    store.append_events(op.id, _more(datetime(2026, 2, 24, tzinfo=UTC), 1, 3))
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM operations WHERE id = :id"), {"id": op.id})
    assert table_counts(store)["operation_events"] == 0


def test_a_revision_with_an_operation_cannot_be_deleted(store: Store) -> None:
    """ON DELETE RESTRICT keeps an applied revision while an operation points at it."""
    revision_id = _propose(store)
    store.record_operation("kimi-01", 1, "resize", revision_id=revision_id)
    # pg8000 reports a foreign key violation as ProgrammingError, sqlite3 as IntegrityError.
    with (
        pytest.raises((IntegrityError, ProgrammingError), match=r"(?i)foreign key"),
        store.engine.begin() as conn,
    ):
        conn.execute(text("DELETE FROM revisions WHERE id = :id"), {"id": revision_id})
    assert store.revision(revision_id).id == revision_id


def test_store_refuses_a_database_that_is_not_migrated(db_url: str) -> None:
    """Opening a store on an empty database says to run `kimi-ops db upgrade`."""
    with pytest.raises(MigrationError, match="kimi-ops db upgrade"):
        Store(db_url)


NAIVE = datetime(2026, 2, 24, 11, 0)
AWARE = datetime(2026, 2, 24, 11, 0, tzinfo=UTC)
BAD_INPUT: list[tuple[str, Callable[[Store, int], Any], type[Exception], str]] = [
    ("unknown outcome", lambda s, r: s.record_outcome(r, "exploded"), InputError,
     "outcome 'exploded' is not known"),
    ("empty host", lambda s, r: s.record_revision(" ", SIZE_48, PLAN_48, proposed_by="U1"),
     InputError, "host is empty"),
    ("naive time", lambda s, r: s.record_apply(r, "U0ANA", at=NAIVE), InputError,
     "has no time zone"),
    ("NaN ratio", lambda s, r: s.record_revision(
        "kimi-01", HiCacheSetting(True, ratio=float("nan")), PLAN_48, proposed_by="U1"),
     InputError, "hicache ratio is nan"),
    ("NaN in plan JSON", lambda s, r: s.record_revision(
        "kimi-01", SIZE_48, PlanSummary(1.0, 8.0, 1, "fits", "", {"x": float("inf")}),
        proposed_by="U1"), InputError, "NaN or infinity"),
    ("int key in JSON", lambda s, r: s.record_revision(
        "kimi-01", SIZE_48, PlanSummary(1.0, 8.0, 1, "fits", "", {"by_rank": {0: 1}}),
        proposed_by="U1"), InputError, "JSON keys must be strings"),
    ("NUL in text", lambda s, r: s.record_refusal("U1", "apply\x00", "no"), InputError,
     "NUL character"),
    ("negative startup", lambda s, r: s.record_outcome(r, "failed", startup_seconds=-1),
     InputError, "startup seconds is -1"),
    ("failure lines on ready", lambda s, r: s.record_outcome(r, "ready", failure_lines=["x"]),
     InputError, "belong to 'failed'"),
    ("unknown revision", lambda s, r: s.record_apply(r + 1000, "U0ANA"), NotFound,
     f"no revision {1000 + 1}"),
    ("refusal naming an unknown revision", lambda s, r: s.record_refusal(
        "U1", "apply", "no", revision_id=r + 1000), NotFound,
     f"no revision {1000 + 1} is recorded; `kimi-ops history` lists them"),
    ("unknown operation", lambda s, r: s.finish_operation(1000, "ready"), NotFound,
     "no operation 1000 is recorded"),
    ("unknown proposal", lambda s, r: s.attach_proposal_message(1000, "1700000000.000100"),
     NotFound, "no proposal 1000 is recorded"),
    ("unknown schedule", lambda s, r: s.delete_schedule(1000), NotFound,
     "no report schedule 1000 is recorded"),
    ("proposal id 0", lambda s, r: s.proposal(0), InputError, "proposal id is 0"),
    ("schedule id as text", lambda s, r: s.update_schedule(
        "7", enabled=False),  # type: ignore[arg-type]
     InputError, "schedule id must be a whole number"),
    ("expiry before proposal", lambda s, r: s.record_proposal(
        "kimi-01", SIZE_48, PLAN_48, proposed_by="U1", channel="C1", expires_at=AWARE,
        fingerprint="f", requested={}), InputError, "is not after the proposal time"),
    ("event seq 0", lambda s, r: s.append_events(
        s.record_operation("kimi-01", 9, "restart").id,
        [StoredEvent(1, AWARE, EventPhase.INIT, "m"), StoredEvent(0, AWARE, EventPhase.INIT, "m")]),
     InputError, "event seq is 0"),
    ("events of an unknown operation", lambda s, r: s.append_events(
        1000, [StoredEvent(1, AWARE, EventPhase.INIT, "m")]), NotFound,
     "no operation 1000 is recorded"),
    ("unknown event phase", lambda s, r: s.append_events(
        s.record_operation("kimi-01", 9, "restart").id,
        [StoredEvent(1, AWARE, "loading_weights", "m")]),  # type: ignore[arg-type]
     InputError, "event 1 phase 'loading_weights' is not known"),
    ("unknown failure kind", lambda s, r: s.record_outcome(r, "failed", failure_kind="host_ram"),
     InputError, "failure kind 'host_ram' is not known"),
    ("unknown operation kind", lambda s, r: s.record_operation("kimi-01", 9, "reboot"),
     InputError, "operation kind 'reboot' is not known"),
    ("agent operation id as text", lambda s, r: s.record_operation(
        "kimi-01", "op-7", "resize"),  # type: ignore[arg-type]
     InputError, "agent operation id must be a whole number"),
    ("finish with a running state", lambda s, r: s.finish_operation(
        s.record_operation("kimi-01", 9, "restart").id, "running"),
     InputError, "operation state 'running' is not final"),
    ("agent revision id 0", lambda s, r: s.record_agent_revision(r, 0, ["python"]),
     InputError, "agent revision id is 0"),
    ("empty agent command line", lambda s, r: s.record_agent_revision(r, 3, []),
     InputError, "the agent's command line is empty"),
    ("usage above 1", lambda s, r: s.add_capacity_sample(
        CapacitySample("kimi-01", AWARE, token_usage=97.0)), InputError, "token usage is 97.0"),
    ("tokens beyond bigint", lambda s, r: s.record_outcome(r, "failed", device_tokens=2**63),
     InputError, "device tokens is"),
    ("rollback across hosts", lambda s, r: s.record_revision(
        "kimi-02", SIZE_48, PLAN_48, proposed_by="U1", returned_to=r), InputError,
     "a rollback stays on its host"),
    ("history limit 0", lambda s, r: s.history("kimi-01", 0), InputError,
     "history limit is 0"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(
    store: Store, call: Callable[[Store, int], Any], error: type[Exception], message: str
) -> None:
    """Each bad value raises its specific error naming the value, and no table changes."""
    revision_id = _propose(store)
    store.record_apply(revision_id, "U0ANA")
    before = (table_counts(store), store.revision(revision_id))
    with pytest.raises(error, match=re.escape(message)):
        call(store, revision_id)
    # The event-seq case records an operation first; only that row may be new.
    counts, revision = table_counts(store), store.revision(revision_id)
    counts["operations"] = before[0]["operations"]
    assert (counts, revision) == before


def test_a_later_record_of_the_same_outcome_adds_only_the_figures_it_lacked(
    store: Store,
) -> None:
    """Recorded ready without figures (a fleet's replica end), then ready with the logged ones
    (its agent's report): the figures are added, the time and who stay the first record's."""
    revision_id = _propose(store)
    store.record_apply(revision_id, "U0ANA")
    first = store.record_outcome(revision_id, "ready", at=datetime(2030, 1, 1, tzinfo=UTC))
    later = store.record_outcome(
        revision_id, "ready", at=datetime(2030, 1, 2, tzinfo=UTC), host_gb_per_rank=44.77,
        startup_seconds=568.0,
    )  # fmt: skip
    assert (later.host_gb_per_rank, later.startup_seconds) == (44.77, 568.0)
    assert (later.finished_at, later.applied_by) == (first.finished_at, "U0ANA")
    again = store.record_outcome(revision_id, "ready", host_gb_per_rank=1.0)
    assert again.host_gb_per_rank == 44.77


def test_a_replica_the_rollout_left_as_it_was_is_unchanged_not_applied(store: Store) -> None:
    """'unchanged' ends a proposed or applied replica's revision (nothing ran); it is final."""
    proposed, applied = _propose(store), _propose(store, "kimi-02")
    store.record_apply(applied, "U0ANA")
    for revision_id in (proposed, applied):
        done = store.record_outcome(revision_id, RevisionOutcome.UNCHANGED)
        assert done.outcome is RevisionOutcome.UNCHANGED
        assert done.finished_at is not None
    with pytest.raises(InputError, match="'unchanged'; it cannot become 'ready'"):
        store.record_outcome(proposed, "ready")


def test_a_revision_records_whether_it_is_a_change_a_restart_or_a_rollback(
    store: Store,
) -> None:
    """record_revision takes the kind (a change unless told); a rollback proposal is a
    rollback; an unknown kind is refused and writes nothing."""
    change = store.record_revision("kimi-01", RATIO_4, PLAN_48, proposed_by="U0BEN")
    restart = store.record_revision(
        "kimi-01", RATIO_4, PLAN_48, proposed_by="U0BEN", kind=RevisionKind.RESTART
    )
    ready = _ready(store)
    back = store.record_proposal(
        "kimi-01", SIZE_48, PLAN_48, proposed_by="U0BEN", channel="C0OPS",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC), fingerprint="f", requested={},
        returned_to=ready,
    )  # fmt: skip
    assert (change.kind, restart.kind) == (RevisionKind.CHANGE, RevisionKind.RESTART)
    assert store.revision(back.revision_id).kind is RevisionKind.ROLLBACK
    before = table_counts(store)
    with pytest.raises(InputError, match="kind"):
        store.record_revision("kimi-01", RATIO_4, PLAN_48, proposed_by="U0BEN", kind="resize")
    assert table_counts(store) == before


def _replica(host: str, verdict: Verdict = Verdict.FITS) -> FleetReplicaProposal:
    plan = PlanSummary(PER_RANK_GB, PER_RANK_GB * RANKS, HOST_TOKENS, verdict, "why")
    return FleetReplicaProposal(host, RATIO_4, plan, f"fp-{host}", {"ratio": 4})


def test_a_fleet_proposal_takes_one_id_for_every_replica(store: Store) -> None:
    """Three replicas, one proposal id: each replica has its own revision (refused where its
    plan was), linked to the proposal in order; the proposal's revision is the first one's.
    A single-host proposal has no replicas. Before, a fleet took one proposal id per replica."""
    made = store.record_fleet_proposal(
        "prod",
        [_replica("kimi-01"), _replica("kimi-02", Verdict.REFUSED), _replica("kimi-03")],
        proposed_by="U0BEN",
        channel="C0OPS",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC),
    )
    single = store.record_proposal(
        "kimi-04", RATIO_4, PLAN_48, proposed_by="U0BEN", channel="C0OPS",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC), fingerprint="f", requested={},
    )  # fmt: skip
    assert single.id == made.proposal.id + 1
    assert list(made.revisions) == ["kimi-01", "kimi-02", "kimi-03"]
    assert made.proposal.revision_id == made.revisions["kimi-01"]
    assert made.proposal.requested == {"fleet": "prod", "ratio": 4}
    linked = store.fleet_proposal_revisions(made.proposal.id)
    assert {host: r.id for host, r in linked.items()} == dict(made.revisions)
    assert [r.outcome for r in linked.values()] == [
        RevisionOutcome.PROPOSED,
        RevisionOutcome.REFUSED,
        RevisionOutcome.PROPOSED,
    ]
    assert all(r.proposed_by == "U0BEN" for r in linked.values())
    assert store.fleet_proposal_revisions(single.id) == {}


def test_a_bad_fleet_proposal_is_refused_and_writes_nothing(store: Store) -> None:
    """No replica, a host twice, or an expiry in the past: refused, nothing written."""
    before = table_counts(store)
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    for replicas, why in (
        ([], "no replica"),
        ([_replica("kimi-01"), _replica("kimi-01")], "names a host twice"),
    ):
        with pytest.raises(InputError, match=why):
            store.record_fleet_proposal(
                "prod", replicas, proposed_by="U0BEN", channel="C0OPS", expires_at=expires
            )
    with pytest.raises(InputError, match="is not after the proposal time"):
        store.record_fleet_proposal(
            "prod", [_replica("kimi-01")], proposed_by="U0BEN", channel="C0OPS",
            expires_at=datetime(2020, 1, 1, tzinfo=UTC),
        )  # fmt: skip
    assert table_counts(store) == before
