"""The agent's SQLite state: operations, gap-free events, revisions and what they summarise."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bot.agent.state.agent_state import AgentState
from bot.agent.state.resume_point import ResumePoint, Stage, Step
from bot.errors import StoreError
from bot.planner import StartSample

NOW = "2026-03-02T09:00:00.000+00:00"


def _op(state: AgentState) -> int:
    return state.create_operation(
        kind="resize", actor="ana", created_at=NOW, request={"ratio": 4}, plan=None
    )


def test_events_are_numbered_without_gaps_across_threads(tmp_path: Path) -> None:
    """Events appended from several threads get seq 1..N with no gap or repeat."""
    state = AgentState(tmp_path)
    op_id = _op(state)

    def add(n: int) -> None:
        for i in range(n):
            state.append_event(op_id, at=NOW, phase="init", message=f"m{i}", progress=0.1)

    threads = [threading.Thread(target=add, args=(10,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    seqs = [e.seq for e in state.events(op_id)]
    assert seqs == list(range(1, 31))
    assert [e.seq for e in state.events(op_id, after=28)] == [29, 30]


def test_state_survives_reopening(tmp_path: Path) -> None:
    """A second AgentState on the same directory sees the operation, its events, its state and
    its resume point."""
    state = AgentState(tmp_path)
    op_id = _op(state)
    state.append_event(op_id, at=NOW, phase="stalled", message="x", progress=0.2, state="stalled")
    point = ResumePoint(Stage.APPLY, Step.FOLLOWING, 1, ("python3", "-m", "sglang"), pid=42)
    state.save_resume_point(op_id, point)
    state.close()
    again = AgentState(tmp_path)
    view = again.operation(op_id)
    assert view is not None
    assert view.state == "stalled"
    assert again.resume_point(op_id) == point
    assert [u.id for u in again.unfinished_operations()] == [op_id]
    assert view.to_dict()["request"] == {"ratio": 4}


def test_revisions_give_samples_capacity_and_last_ready(tmp_path: Path) -> None:
    """Ready revisions feed startup samples; the newest start with a device pool gives the
    capacity; the rollback target skips the current revision, any with the current command line
    and those that never became ready."""
    state = AgentState(tmp_path)
    first = state.add_revision(
        argv=["a"], hicache={"enabled": True}, created_at=NOW, actor="ana", kind="observed",
        outcome="ready", became_ready=True,
    )  # fmt: skip
    second = state.add_revision(argv=["b"], hicache={}, created_at=NOW, actor="ana", kind="resize")
    state.update_revision(second, outcome="ready", became_ready=True, startup_s=612.0,
                          device_tokens=159274, kv_bytes_per_token=70272.0,
                          host_gb_per_rank=44.77, host_tokens_per_rank=637097)  # fmt: skip
    third = state.add_revision(argv=["c"], hicache={}, created_at=NOW, actor="ben", kind="resize")
    state.update_revision(third, outcome="failed")
    assert state.startup_samples() == [StartSample(612.0, 44.77)]
    assert state.last_start_capacity() == (159274, 70272.0, 637097, 44.77)
    last = state.rollback_target(None, ["c"])
    assert last is not None
    assert last.id == second
    other = state.rollback_target(second, ["c"])
    assert other is not None
    assert other.id == first
    same_line = state.rollback_target(None, ["b"])  # running "b" again would change nothing
    assert same_line is not None
    assert same_line.id == first
    assert [r.id for r in state.revisions()] == [third, second, first]


def test_unknown_fields_are_rejected(tmp_path: Path) -> None:
    """Updating a field that does not exist raises and changes nothing."""
    state = AgentState(tmp_path)
    op_id = _op(state)
    with pytest.raises(ValueError, match="not an operation field"):
        state.update_operation(op_id, kind="restart")
    view = state.operation(op_id)
    assert view is not None
    assert view.kind == "resize"


def test_unwritable_state_dir_is_a_store_error(tmp_path: Path) -> None:
    """A state directory that cannot be created raises StoreError naming it."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="state directory"):
        AgentState(blocker / "sub")
