"""The server's log rotated mid-start (logrotate's ``create``: the file moved to
``server.log.1`` and a new empty one made under the name) while the real agent follows a resize
on the process backend: the server goes on writing the moved file, and the resize still ends
ready with every later phase, the rotation told in the operation's events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bot.vocab import EventPhase, OperationState
from tests.chaos._agent_rig import AgentRig, replace_flag

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _phase(name: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(event["phase"] == name for event in events)


def test_a_log_rotated_mid_start_still_ends_ready(agent_rig: Callable[..., AgentRig]) -> None:
    """Resize ratio 2 -> 3; once the host pool is pinning (slowly), the log is rotated with
    create: the operation ends ready with http, warmup and verifying after the rotation, one
    start for the resize, no stall, the new empty log untouched by the old server, status with no
    problem left (failed before the fix: the follower read the new empty file, stalled and
    rolled a healthy server back at the hard ceiling)."""
    rig = agent_rig(sim_env={"KIMI_SIM_FAIL": "slow_pin:300"}, stall_after_s=120)
    rig.start_server()
    old = rig.command_on_disk()
    new = replace_flag(old, "--hicache-ratio", "3")
    agent = rig.start_agent()
    submitted = agent.submit(kind="resize", ratio=3)
    assert submitted.status_code == 202, submitted.text
    op_id = submitted.json()["id"]
    agent.follow(op_id, until=_phase(EventPhase.HOST_POOL))
    log = rig.settings.log_file
    log.rename(log.with_name("server.log.1"))
    log.write_bytes(b"")
    final, events = agent.follow(op_id)
    phases = [event["phase"] for event in events]
    assert final["state"] == OperationState.READY, phases
    after = phases[phases.index(EventPhase.HOST_POOL) :]
    for phase in (EventPhase.HTTP, EventPhase.WARMUP, EventPhase.VERIFYING):
        assert phase in after, phases
    assert EventPhase.STALLED not in phases
    moved = log.with_name("server.log.1").read_text()
    assert moved.count("server_args=") == 2, "the first server and the resize's, both there"
    assert log.read_text() == ""
    assert agent.status()["problems"] == []
    rig.check(agent, op_id, known=(old, new))
    assert agent.stop() == 0
