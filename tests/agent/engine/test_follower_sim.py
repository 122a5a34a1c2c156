"""The follower end to end on a log moved or deleted mid-start: the real simulator as the server
(process backend), real SQLite state, the agent's own planner and SGLang client.

small-2gpu at ``--mem-fraction-static 0.7``; the simulator runs at a time scale slow enough that
the log can be moved while the weights load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.agent.engine.manager import OperationManager
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

RATIO_2 = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache", "--hicache-ratio", "2")


def _wait_phase(manager: OperationManager, op_id: int, phase: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(e.phase == phase for e in manager.state.events(op_id)):
        assert time.monotonic() < deadline, f"no {phase} event in {timeout_s} s"
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["mv", "rm"])
def test_a_log_moved_or_deleted_mid_start_still_reaches_ready(
    harness_factory: Callable[..., Harness], tmp_path: Path, how: str
) -> None:
    """``mv server.log server.log.1`` (or ``rm``) while the new server loads its weights: the
    resize still reaches ready with every later phase read through the file's inode, the move
    told in the operation's events (failed before the fix: the follower read "" from the missing
    name, stalled in load_weights and rolled a healthy server back at the hard ceiling)."""
    harness = harness_factory(
        sim_command(free_port(), *RATIO_2), time_scale="0.3", stall_after_s=60
    )
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=4)
    _wait_phase(manager, op.id, "load_weights")
    log = harness.settings.log_file
    if how == "mv":
        log.rename(tmp_path / "server.log.1")
    else:
        log.unlink()
    final = wait_final(manager, op.id, timeout_s=120)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    phases = [e.phase for e in events]
    for later in ("kv_pool", "host_pool", "http", "verifying"):
        assert later in phases, phases
    told = [e for e in events if "moved or deleted" in e.message]
    assert len(told) == 1, [e.message for e in events]
    assert "stalled" not in phases
    assert manager.problems() == ()
