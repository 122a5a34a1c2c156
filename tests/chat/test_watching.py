"""Watching operations against a real agent: a start dying of host memory rolled back, the
agent killed and restarted mid-watch, and history completed with an operation started by curl."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bot.chat.policy import Actor
from bot.chat.replies import HistoryReply
from bot.store import RevisionOutcome, Store
from bot.vocab import EventPhase, FailureKind, OperationState
from tests.chat._core_fixtures import (
    RecordingFrontEnd,
    chat_settings,
    migrated_store,
    propose_and_apply,
    running_core,
)
from tests.chat.conftest import SMALL, RunningAgent, SimHost, agent_on_sim, free_port

ANA, BEN = Actor("ana"), Actor("ben")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with migrated_store(tmp_path) as the_store:
        yield the_store


@pytest.mark.slow
def test_a_start_dying_of_host_memory_is_watched_to_rolled_back(
    tmp_path: Path, store: Store
) -> None:
    """On the 2-GPU host with no headroom, size 24 passes the planner but SGLang 0.5.23 refuses
    it at start: the watcher notifies both people of the rollback with its cause, ends rolled
    back, and the audit records the failure kind and SGLang's line."""
    host = SimHost(
        profile=SMALL,
        version="0.5.23",
        headroom_gb=0,
        hicache=("--enable-hierarchical-cache", "--hicache-size", "8"),
    )
    front = RecordingFrontEnd()
    with agent_on_sim(tmp_path / "small", host) as agent:
        settings = chat_settings({"small-01": agent.url})
        with running_core(settings, store, front) as core:
            started = propose_and_apply(core, "resize size 24", BEN, ANA)
            final = core.wait(started.watch, timeout_s=120)
    assert final is not None
    assert final.state is OperationState.ROLLED_BACK
    assert final.rollback is not None
    assert final.rollback.kind is FailureKind.HOST_MEMORY
    noticed = [view.state for people, _, view in front.notices if people == ("ben", "ana")]
    assert noticed == [OperationState.ROLLING_BACK, OperationState.ROLLED_BACK]
    assert any(view.phase is EventPhase.ROLLING_BACK for _, view in front.views)
    # Newest first: the rollback's own start (back to the last config that was ready), then
    # the failed size 24.
    rollback, revision = store.history("small-01", 2)
    assert revision.outcome is RevisionOutcome.ROLLED_BACK
    assert revision.settings.size_gb == 24
    assert revision.failure_kind is FailureKind.HOST_MEMORY
    assert any("Not enough host memory available" in line for line in revision.failure_lines)
    assert rollback.rollback_of == revision.id
    assert rollback.outcome is RevisionOutcome.READY
    assert rollback.returned_to is not None
    returned_to = store.revision(rollback.returned_to)
    assert returned_to.outcome is RevisionOutcome.READY
    assert rollback.settings == returned_to.settings


@pytest.mark.slow
def test_the_agent_killed_mid_watch_is_reported_and_watching_goes_on(
    tmp_path: Path, store: Store
) -> None:
    """SIGKILL the agent while the watched start loads weights: the front end hears 'unreachable
    since', the agent comes back on the same port, and the watch ends ready with every event
    stored once."""
    host = SimHost(listen_port=free_port(), time_scale=0.01)
    front = RecordingFrontEnd()
    with agent_on_sim(tmp_path / "kimi-01", host) as agent:
        settings = chat_settings({"kimi-01": agent.url})
        with running_core(settings, store, front) as core:
            started = propose_and_apply(core, "resize ratio 4", BEN, ANA)
            _wait_for(front, EventPhase.LOAD_WEIGHTS)
            agent.kill()
            _wait_until(lambda: bool(front.silences))
            agent.start()
            final = core.wait(started.watch, timeout_s=180)
    assert final is not None
    assert final.state is OperationState.READY
    assert front.silences[0][0].operation_id == started.operation.id
    record = store.operation_by_agent_id("kimi-01", started.operation.id)
    assert record is not None
    stored = store.operation_events(record.id)
    assert [event.seq for event in stored] == list(range(1, len(stored) + 1))


@pytest.mark.slow
def test_history_includes_an_operation_started_with_curl(
    kimi_agent: RunningAgent, store: Store
) -> None:
    """A resize an admin posts straight to the agent appears in history, applied by its actor,
    ready with the GB per rank SGLang logged; asking again imports nothing twice."""
    page = kimi_agent.run_to_end({"kind": "resize", "ratio": 3, "actor": "admin-curl"})
    assert page["state"] == OperationState.READY
    settings = chat_settings({"kimi-01": kimi_agent.url})
    with running_core(settings, store, RecordingFrontEnd()) as core:
        first = core.handle("history", BEN)
        again = core.handle("history", BEN)
    assert isinstance(first, HistoryReply)
    assert isinstance(again, HistoryReply)
    assert first.entries == again.entries
    by_admin = [entry for entry in first.entries if entry.applied_by == "admin-curl"]
    assert len(by_admin) == 1
    assert by_admin[0].outcome == "ready"
    assert by_admin[0].setting == "ratio 3"
    logged = page["events"][-1]["data"]["host_gb_per_rank"]
    assert by_admin[0].logged_gb_per_rank == logged


def _wait_until(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``condition`` (a bounded wait, not a measurement)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _wait_for(front: RecordingFrontEnd, phase: EventPhase) -> None:
    _wait_until(lambda: any(view.phase is phase for _, view in front.views))
