"""The agent's state directory on a real small tmpfs, filled while the real agent follows a resize
on the process backend, then freed: the operation waits with its start followed in memory,
status says why, nothing is lost or recorded twice, and the resize ends ready by itself.

A tmpfs needs root, which this suite has; without it the test fails saying so.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.vocab import EventPhase, OperationState
from tests.chaos._agent_rig import AgentRig, replace_flag

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs on the test's tmp dir, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            "the full-disk scenario mounts a small tmpfs and needs root (mount -t tmpfs): "
            f"{done.stderr.strip() or done.returncode}"
        )
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * 65536)
    return filler


def _phase(name: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(event["phase"] == name for event in events)


def test_a_full_state_disk_mid_start_waits_then_ends_ready(
    agent_rig: Callable[..., AgentRig], small_disk: Path
) -> None:
    """Resize ratio 2 -> 3; the state disk filled once the host pool is pinning: status
    answers, naming the operation that cannot record and the full disk; a second resize is
    refused (409: the first still runs, with its thread); freed, the resize ends ready with its
    events numbered 1..n, no step twice, the state file intact (failed before the fix: an
    uncaught StoreError left the operation running with nobody behind it, every submit 409
    until the agent was restarted)."""
    rig = agent_rig(
        sim_env={"KIMI_SIM_FAIL": "slow_pin:300"},
        state_dir=str(small_disk / "agent"),
        stall_after_s=120,
    )
    rig.start_server()
    old = rig.command_on_disk()
    new = replace_flag(old, "--hicache-ratio", "3")
    agent = rig.start_agent()
    submitted = agent.submit(kind="resize", ratio=3)
    assert submitted.status_code == 202, submitted.text
    op_id = submitted.json()["id"]
    agent.follow(op_id, until=_phase(EventPhase.HOST_POOL))
    filler = _fill(small_disk)
    deadline = time.monotonic() + 60
    while True:
        problems = agent.status()["problems"]
        if any("cannot record" in p for p in problems):
            break
        assert time.monotonic() < deadline, f"no problem in status: {problems}"
        time.sleep(0.2)
    assert any(f"operation {op_id} cannot record" in p for p in problems), problems
    assert any("is full" in p for p in problems), problems
    refused = agent.submit(kind="resize", ratio=4)
    assert refused.status_code == 409, refused.text
    filler.unlink()
    final, events = agent.follow(op_id)
    phases = [event["phase"] for event in events]
    assert final["state"] == OperationState.READY, phases
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    for phase in (EventPhase.HTTP, EventPhase.VERIFYING, EventPhase.READY):
        assert phase in phases, phases
    assert agent.status()["problems"] == []
    rig.check(agent, op_id, known=(old, new))
    assert agent.stop() == 0
