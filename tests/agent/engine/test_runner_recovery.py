"""Operations that do not go straight to ready: agent restart mid-start, leftover GPU processes,
stalls and the hard ceiling, a server dying while no agent watches (the real simulator, SimProbe,
on both control backends: ``process``, and ``systemd`` over the stand-in systemctl/journalctl,
as systemd is not PID 1 here; see ``tests/agent/engine/_backends.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from bot.agent.engine.crash_points import CrashAt, CrashPoint
from bot.agent.service import make_probe
from bot.agent.sglang_client import SGLangClient
from bot.agent.state.resume_point import Stage
from bot.errors import OperationConflict
from tests.agent._ops_fixtures import phases, wait_final
from tests.agent.conftest import Spawn, wait_until
from tests.agent.engine._backends import (
    BackendRig,
    backend_rig,
    harness_factory,
    systemd_rig,
)

__all__ = ["backend_rig", "harness_factory", "systemd_rig"]

pytestmark = pytest.mark.slow

Rigs = Callable[..., BackendRig]
# A slower pin for the operation's start only: 15.81 GB per rank at ratio 3, at 2 GB/s x 0.01 x
# 100 = 7.9 s more, so an agent closed while weights load surely closes before ready, even on a
# loaded machine.
SLOW_PIN = {"KIMI_SIM_FAIL": "slow_pin:100"}


def test_agent_restart_mid_start_resumes_to_ready_without_a_second_start(
    backend_rig: Rigs,
) -> None:
    """A new manager on the same state dir (the old one closed while weights load, the server
    still starting) re-attaches through the log, ends ready serving the new config, the event
    list has no gap and no repeated step, and the server was started once for the operation."""
    rig = backend_rig()
    rig.start_server()
    rig.set_server_env(SLOW_PIN)
    first = rig.manager()
    op = first.submit("resize", actor="ana", ratio=3)

    def loading() -> bool:
        return any(e.phase == "load_weights" for e in first.state.events(op.id))

    def so_far() -> str:
        return f"the events so far: {[e.message for e in first.state.events(op.id)]}"

    # Generous: stopping and starting takes a few interpreter starts (the simulator, the
    # stand-in systemctl's), each several seconds on a loaded machine.
    wait_until(loading, timeout_s=120, explain=so_far)
    first.close()
    assert first.get(op.id).state == "running"
    second = rig.manager(fresh=True)
    assert second.resume() == [op.id]
    final = wait_final(second, op.id)
    events = second.state.events(op.id)
    assert final.state == "ready", events[-1].message
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    steps = [e.data["step"] for e in events if "step" in e.data]
    assert len(steps) == len(set(steps))
    assert phases(events)[-3:] == ["warmup", "verifying", "ready"]
    assert rig.starts() == 2  # the old server + one start
    info = rig.client().server_info()
    assert info is not None
    assert info["hicache_ratio"] == 3


def test_leftover_gpu_process_blocks_the_start_naming_its_pid(
    backend_rig: Rigs, spawn: Spawn
) -> None:
    """A stray scheduler (``python -m bot.sim.stray``) holding the GPUs makes the operation fail
    after the stop without starting the server again, naming the stray's PID."""
    rig = backend_rig(gpu_free_timeout_s=1)
    rig.start_server()
    stray = spawn(sys.executable, "-m", "bot.sim.stray", "--gpus", "0,1", env=rig.server_env(),
                  stdout=subprocess.DEVNULL)  # fmt: skip
    probe = make_probe(rig.settings)

    def held() -> bool:
        return any(p.pid == stray.pid for g in probe.gpus().gpus for p in g.processes)

    wait_until(held, timeout_s=30)
    manager = rig.manager()
    op = manager.submit("restart", actor="ana")
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert f"PID {stray.pid}" in events[-1].message
    assert "starting" not in phases(events)
    assert not rig.control().status().running
    assert rig.starts() == 1  # never started again


def test_a_resize_that_never_starts_leaves_the_command_at_the_config_that_ran(
    backend_rig: Rigs, spawn: Spawn
) -> None:
    """A resize whose GPUs stay held by a stray after the stop fails without starting, and the
    command on disk is still the one that last ran, the resize's never written (failed before
    the fix: the command was written before the stop, so the next restart would have started a
    configuration that never came up)."""
    rig = backend_rig(gpu_free_timeout_s=1)
    rig.start_server()
    before = rig.control().read_command()
    stray = spawn(sys.executable, "-m", "bot.sim.stray", "--gpus", "0,1", env=rig.server_env(),
                  stdout=subprocess.DEVNULL)  # fmt: skip
    probe = make_probe(rig.settings)
    wait_until(
        lambda: any(p.pid == stray.pid for g in probe.gpus().gpus for p in g.processes),
        timeout_s=30,
    )
    manager = rig.manager()
    op = manager.submit("resize", actor="ana", ratio=3)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert f"PID {stray.pid}" in events[-1].message
    assert "the server is stopped" in events[-1].message
    assert rig.control().read_command() == before
    assert rig.starts() == 1


def test_stall_is_reported_and_the_hard_ceiling_ends_it(backend_rig: Rigs) -> None:
    """A server that goes silent while alive (KIMI_SIM_FAIL=stall:load_weights) gets a
    ``stalled`` event and state; the hard ceiling then fails the operation, and a restart does
    not roll back by itself: the stuck server is stopped and the message says so."""
    rig = backend_rig(
        "--enable-hierarchical-cache",
        "--hicache-size",
        "4",
        env={"KIMI_SIM_FAIL": "stall:load_weights"},
        stall_after_s=0.5,
        # From the start's record: room for the interpreters to start on a loaded machine (the
        # stand-in systemctl starts two; over 10 s at a load of 15-30) before the log begins,
        # then the stall well before.
        hard_ceiling_s=30,
    )
    manager = rig.manager()
    op = manager.submit("restart", actor="ana")

    def stalled() -> bool:
        return manager.get(op.id).state == "stalled"

    wait_until(stalled, timeout_s=90)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert "stalled" in phases(events)
    assert final.state == "failed"
    assert final.failure is not None
    assert final.failure["kind"] == "timeout"
    assert "hard ceiling" in events[-1].message
    assert "the restarted config (the current one) failed to start" in events[-1].message
    assert not rig.control().status().running  # the stuck server was stopped


def test_server_dying_while_the_agent_is_down_is_settled_on_resume(backend_rig: Rigs) -> None:
    """If the server the operation started is SIGKILLed while no agent watches, the next
    agent's resume() settles it as a failure and rolls back to the config that was ready, once."""
    rig = backend_rig()
    rig.start_server()
    rig.set_server_env(SLOW_PIN)
    first = rig.manager()
    op = first.submit("resize", actor="ana", ratio=3)

    def loading() -> bool:
        return any(e.phase == "load_weights" for e in first.state.events(op.id))

    def so_far() -> str:
        return f"the events so far: {[e.message for e in first.state.events(op.id)]}"

    # Generous: stopping and starting takes a few interpreter starts (the simulator, the
    # stand-in systemctl's), each several seconds on a loaded machine.
    wait_until(loading, timeout_s=120, explain=so_far)
    first.close()
    pid = rig.control().status().main_pid
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # the server's own process group, on either backend
    # The control that started it sees it dead (and the process backend's reaps its child).
    wait_until(lambda: not rig.control().status().running, timeout_s=30)
    assert not psutil.pid_exists(pid), f"pid {pid} outlived its SIGKILL"
    second = rig.manager(fresh=True)
    second.resume()
    final = wait_final(second, op.id)
    events = second.state.events(op.id)
    assert final.state == "rolled_back", events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == "unknown"  # a SIGKILL leaves no line in the log
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert phases(events).count("rolling_back") == 1
    assert rig.starts() == 3  # the first server, the killed one, the rollback's
    info = rig.client().server_info()
    assert info is not None
    assert info["hicache_ratio"] == 2


def test_a_stall_ends_when_the_log_moves_again(backend_rig: Rigs) -> None:
    """A pin far slower than expected (KIMI_SIM_FAIL=slow_pin) is reported as a stall while the
    server lives; when the log moves again the operation goes back to running and ends ready."""
    rig = backend_rig(
        "--mem-fraction-static",  # HiCache off: no pin
        "0.7",
        # 8 GB at 2 GB/s x 0.05 x 80 = 16 s silent: the stall is seen from about 6.4 s on, a
        # window of nearly 10 s that a watcher starved on a loaded machine still lands in.
        env={"KIMI_SIM_TIME_SCALE": "0.05", "KIMI_SIM_FAIL": "slow_pin:80"},
        # 2 s plus the pin's expected ~4.4 s (8 GB x 60 s / 110 GB) < the 16 s pin; not less than
        # 2 s, so a slow interpreter start on a loaded machine is no stall before the first line.
        stall_after_s=2.0,
    )
    rig.start_server()
    manager = rig.manager()
    op = manager.submit("resize", actor="ana", size_gb=8)

    def so_far() -> str:
        return f"the events so far: {[e.message for e in manager.state.events(op.id)]}"

    # The stall is read from the recorded events, not the state's short window at a poll.
    wait_until(lambda: "stalled" in phases(manager.state.events(op.id)), timeout_s=90,
               explain=so_far)  # fmt: skip
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


def test_health_failing_after_http_came_up_fails_the_start(backend_rig: Rigs) -> None:
    """/health failing for the grace time after HTTP came up fails the start, and the rollback
    (unhealthy too) fails once more: the operation ends failed, with the code in the message."""
    rig = backend_rig()
    rig.start_server()
    unhealthy = _Unhealthy(rig.client())
    manager = rig.manager(sglang=unhealthy, health_grace_s=0.5)
    op = manager.submit("resize", actor="ana", ratio=3)  # the running config was healthy
    unhealthy.broken = True
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert final.failure is not None
    assert "/health answered 503" in events[-1].message
    assert phases(events).count("rolling_back") == 1
    assert "verifying" not in phases(events)


def test_a_failed_rollback_leaves_the_server_stopped_whatever_the_failure(
    backend_rig: Rigs,
) -> None:
    """A rollback that fails on /health (its server alive, just unhealthy) ends with the server
    stopped, as the README says, and the message says so (failed before the fix: the rollback's
    unhealthy server was left running, holding its GPUs and RAM)."""
    rig = backend_rig()
    rig.start_server()
    unhealthy = _Unhealthy(rig.client())
    manager = rig.manager(sglang=unhealthy, health_grace_s=0.5)
    op = manager.submit("resize", actor="ana", ratio=3)
    unhealthy.broken = True
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert phases(events).count("rolling_back") == 1
    assert "the server is stopped" in events[-1].message
    assert not rig.control().status().running


def test_an_operation_whose_thread_ended_unsettled_is_resumed_by_the_next_request(
    backend_rig: Rigs,
) -> None:
    """The operation's thread ends without settling it (the agent "dies" after the stop is
    recorded, but the process lives on): the next request is refused as conflicting and resumes
    the operation, which ends ready (failed before the fix: it stayed running with nobody
    behind it and every later request got 409 until the agent was restarted)."""
    rig = backend_rig()
    rig.start_server()
    manager = rig.manager(crash_points=CrashAt(CrashPoint.STOPPED_RECORDED, Stage.APPLY))
    op = manager.submit("resize", actor="ana", ratio=3)
    assert manager.join(op.id, 60)
    assert not manager.get(op.id).finished
    with pytest.raises(OperationConflict):
        manager.submit("resize", actor="ben", ratio=4)
    final = wait_final(manager, op.id)
    assert final.state == "ready", manager.state.events(op.id)[-1].message
