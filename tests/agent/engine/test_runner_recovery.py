"""Operations that do not go straight to ready: agent restart mid-start, leftover GPU processes,
stalls and the hard ceiling (the real simulator, process backend, SimProbe)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from bot.agent.service import make_probe
from bot.agent.sglang_client import SGLangClient
from tests.agent._ops_fixtures import (
    Harness,
    free_port,
    harness_factory,
    phases,
    sim_command,
    wait_final,
)
from tests.agent.conftest import Spawn, wait_until

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

SMALL = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache")


def test_agent_restart_mid_start_resumes_to_ready_without_a_second_start(
    harness_factory: Callable[..., Harness],
) -> None:
    """A new manager on the same state dir (the old one closed mid-start while the server keeps
    running) re-attaches, ends ready, and the event list has no gap and no repeated step; the
    server was started once (one new ``server_args=`` line in the log)."""
    harness = harness_factory(
        sim_command(free_port(), *SMALL, "--hicache-ratio", "2"), time_scale="0.05"
    )
    harness.start_server()
    first = harness.manager()
    op = first.submit("resize", actor="ana", ratio=3)

    def loading() -> bool:
        return any(e.phase == "load_weights" for e in first.state.events(op.id))

    wait_until(loading, timeout_s=60)
    first.close()
    assert first.get(op.id).state == "running"
    second = harness.manager(fresh=True)
    assert second.resume() == [op.id]
    final = wait_final(second, op.id)
    events = second.state.events(op.id)
    assert final.state == "ready", events[-1].message
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    steps = [e.data["step"] for e in events if "step" in e.data]
    assert len(steps) == len(set(steps))
    assert phases(events)[-3:] == ["warmup", "verifying", "ready"]
    assert harness.log_text().count("server_args=") == 2  # the old server + one start


def test_leftover_gpu_process_blocks_the_start_naming_its_pid(
    harness_factory: Callable[..., Harness], spawn: Spawn
) -> None:
    """A stray scheduler (``python -m bot.sim.stray``) holding the GPUs makes the operation fail
    after the stop without starting, naming the stray's PID."""
    harness = harness_factory(
        sim_command(free_port(), *SMALL, "--hicache-ratio", "2"), gpu_free_timeout_s=1
    )
    harness.start_server()
    env = {**os.environ, **harness.settings.env}
    stray = spawn(sys.executable, "-m", "bot.sim.stray", "--gpus", "0,1", env=env,
                  stdout=subprocess.DEVNULL)  # fmt: skip
    probe = make_probe(harness.settings)

    def held() -> bool:
        return any(p.pid == stray.pid for g in probe.gpus().gpus for p in g.processes)

    wait_until(held, timeout_s=30)
    manager = harness.manager()
    op = manager.submit("restart", actor="ana")
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed"
    assert f"PID {stray.pid}" in events[-1].message
    assert "starting" not in phases(events)
    assert not harness.parts()[0].status().running
    assert harness.log_text().count("server_args=") == 1  # never started again


def test_stall_is_reported_and_the_hard_ceiling_ends_it(
    harness_factory: Callable[..., Harness],
) -> None:
    """A server that goes silent while alive (KIMI_SIM_FAIL=stall:load_weights) gets a
    ``stalled`` event and state; the hard ceiling then fails the operation, and a restart does
    not roll back by itself: the stuck server is stopped and the message says so."""
    harness = harness_factory(
        sim_command(free_port(), "--enable-hierarchical-cache", "--hicache-size", "4"),
        extra_env={"KIMI_SIM_FAIL": "stall:load_weights"},
        stall_after_s=0.5,
        hard_ceiling_s=4,
    )
    manager = harness.manager()
    op = manager.submit("restart", actor="ana")

    def stalled() -> bool:
        return manager.get(op.id).state == "stalled"

    wait_until(stalled, timeout_s=60)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert "stalled" in phases(events)
    assert final.state == "failed"
    assert final.failure is not None
    assert final.failure["kind"] == "timeout"
    assert "hard ceiling" in events[-1].message
    assert "the restarted config (the current one) failed to start" in events[-1].message
    assert not harness.parts()[0].status().running  # the stuck server was stopped


def test_server_dying_while_the_agent_is_down_is_settled_on_resume(
    harness_factory: Callable[..., Harness],
) -> None:
    """If the server the operation started is killed while no agent watches, the next agent's
    resume() settles it as a failure and rolls back to the config that was ready, once."""
    harness = harness_factory(
        sim_command(free_port(), *SMALL, "--hicache-ratio", "2"), time_scale="0.05"
    )
    harness.start_server()
    first = harness.manager()
    op = first.submit("resize", actor="ana", ratio=3)

    def loading() -> bool:
        return any(e.phase == "load_weights" for e in first.state.events(op.id))

    wait_until(loading, timeout_s=60)
    first.close()
    pid = harness.parts()[0].status().main_pid
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    # The control that started it sees it dead (and reaps it, being its parent).
    wait_until(lambda: not harness.parts()[0].status().running, timeout_s=30)
    second = harness.manager(fresh=True)
    second.resume()
    final = wait_final(second, op.id)
    events = second.state.events(op.id)
    assert final.state == "rolled_back", events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == "unknown"  # a SIGKILL leaves no line in the log
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert phases(events).count("rolling_back") == 1
    info = harness.parts()[2].server_info()
    assert info is not None
    assert info["hicache_ratio"] == 2


def test_a_stall_ends_when_the_log_moves_again(harness_factory: Callable[..., Harness]) -> None:
    """A pin far slower than expected (KIMI_SIM_FAIL=slow_pin) is reported as a stall while the
    server lives; when the log moves again the operation goes back to running and ends ready."""
    harness = harness_factory(
        sim_command(free_port(), "--mem-fraction-static", "0.7"),  # HiCache off: no pin
        time_scale="0.05",
        extra_env={"KIMI_SIM_FAIL": "slow_pin:40"},  # 8 GB at 2 GB/s x 0.05 x 40 = 8 s silent
        # 2 s plus the pin's expected ~4.4 s (8 GB x 60 s / 110 GB) < the 8 s pin; not less than
        # 2 s, so a slow interpreter start on a loaded machine is no stall before the first line.
        stall_after_s=2.0,
    )
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", size_gb=8)
    wait_until(lambda: manager.get(op.id).state == "stalled", timeout_s=60)
    wait_until(lambda: manager.get(op.id).state != "stalled", timeout_s=60)
    assert manager.get(op.id).state in ("running", "ready")
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    names = phases(events)
    assert names.index("stalled") < names.index("http")
    assert names.count("stalled") == 1


class _Unhealthy:
    """The real client, except that /health answers 503 for good: the simulator's health only
    flaps (KIMI_SIM_FAIL=health_flap), so a server stuck unhealthy is stood in for here."""

    def __init__(self, client: SGLangClient) -> None:
        self.client = client
        self.broken = False

    def health(self) -> int | None:
        code = self.client.health()
        return 503 if code == 200 and self.broken else code

    def server_info(self) -> dict[str, Any] | None:
        return self.client.server_info()


def test_health_failing_after_http_came_up_fails_the_start(
    harness_factory: Callable[..., Harness],
) -> None:
    """/health failing for the grace time after HTTP came up fails the start, and the rollback
    (unhealthy too) fails once more: the operation ends failed, with the code in the message."""
    harness = harness_factory(sim_command(free_port(), *SMALL, "--hicache-ratio", "2"))
    harness.start_server()
    client = harness.parts()[2]
    unhealthy = _Unhealthy(client)
    manager = harness.manager(sglang=unhealthy, health_grace_s=0.5)
    op = manager.submit("resize", actor="ana", ratio=3)  # the running config was healthy
    unhealthy.broken = True
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert final.failure is not None
    assert "/health answered 503" in events[-1].message
    assert phases(events).count("rolling_back") == 1
    assert "verifying" not in phases(events)
