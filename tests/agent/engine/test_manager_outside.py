"""A server restarted by hand outside the agent, end to end on the process backend with the real
simulator: the same command is adopted (its pid, its RAM, stopped by the next change), another
command on the server's port is reported plainly."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from bot.agent.service import build_service
from bot.agent.sglang_client import SGLangClient
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

RATIO_2 = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache", "--hicache-ratio", "2")


@pytest.fixture
def by_hand() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Servers a person started from a shell; reaped (killed if still running) afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def _restart_by_hand(
    harness: Harness, pid: int, argv: list[str], by_hand: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    """SIGTERM the agent's server and launch ``argv`` from "a shell", its output appended to
    the same log; returns once it answers /health 200."""
    os.kill(pid, signal.SIGTERM)
    psutil.wait_procs([psutil.Process(pid)], timeout=30)
    harness.parts()[0].status()  # the agent's control reaps its child, as its next poll would
    settings = harness.settings
    with settings.log_file.open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **settings.env},
            start_new_session=True,
        )
    by_hand.append(process)
    client = SGLangClient(settings.server_url, timeout=2.0)
    harness.clients.append(client)
    deadline = time.monotonic() + 60
    while client.health() != 200:
        assert process.poll() is None, harness.log_text()[-2000:]
        assert time.monotonic() < deadline, "the hand-started server never became healthy"
        time.sleep(0.05)
    return process


def test_a_server_restarted_by_hand_is_adopted_counted_and_replaced(
    harness_factory: Callable[..., Harness], by_hand: list[subprocess.Popen[bytes]]
) -> None:
    """SIGTERM and a relaunch of the same command by hand: status shows it running with its
    pid, its RAM held and a problem saying it was started outside the agent; a resize stops it
    and reaches ready (failed before the fix: status said stopped holding 0 GB, and the resize
    failed "GPUs still busy ... the server is stopped" with command.json left at a config that
    never started)."""
    harness = harness_factory(sim_command(free_port(), *RATIO_2))
    pid = harness.start_server()
    argv = list(harness.settings.command)
    hand = _restart_by_hand(harness, pid, argv, by_hand)
    control, state, client = harness.parts(fresh=True)
    service = build_service(harness.settings, control=control, state=state, sglang=client)
    harness.managers.append(service.manager)
    body = service.status()
    assert body["server"]["state"] == "running"
    assert body["server"]["pid"] == hand.pid
    assert body["ram"]["server_held_bytes"] > 0
    assert any(f"(pid {hand.pid}) was started outside the agent" in p for p in body["problems"]), (
        body["problems"]
    )
    op = service.manager.submit("resize", actor="ana", ratio=4)
    final = wait_final(service.manager, op.id)
    events = service.manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    assert f"stopping the server (pid {hand.pid})" in [e.message for e in events]
    assert hand.wait(timeout=30) is not None
    assert "--hicache-ratio" in control.read_command()
    assert control.read_command()[control.read_command().index("--hicache-ratio") + 1] == "4"
    assert not any("outside the agent" in p for p in service.manager.problems())


def test_another_command_on_the_servers_port_is_reported_plainly(
    harness_factory: Callable[..., Harness], by_hand: list[subprocess.Popen[bytes]]
) -> None:
    """Relaunched by hand with other flags (ratio 3): not adopted, and status says a server
    runs that this agent did not start, with its pid and its flags (failed before the fix:
    status said stopped, with no problem)."""
    harness = harness_factory(sim_command(free_port(), *RATIO_2))
    pid = harness.start_server()
    argv = list(harness.settings.command)
    argv[argv.index("--hicache-ratio") + 1] = "3"
    hand = _restart_by_hand(harness, pid, argv, by_hand)
    manager = harness.manager(fresh=True)
    assert not manager.control.status().running
    (line,) = [p for p in manager.problems() if "not started by this agent" in p]
    assert f"pid {hand.pid}" in line
    assert "--hicache-ratio 3" in line
