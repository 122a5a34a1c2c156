"""The post-ready watch end to end: the agent (process backend) takes the real simulator to
ready through a resize, then another process on the simulated host eats its RAM, gives it back
and eats it again.

small-2gpu: 60 GB available; the server holds 5 GB of its own (1 + 2 ranks x 2) and, at ratio 1,
2 x 5.27 GB of host pool: 44.5 GB are left once it is ready. A 40 GB eater leaves 4.5 GB, under
the guard's floor (SGLang's 10 GiB reserve, 10.74 GB); without it the host is back at 44.5 GB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bot.agent.service import AgentService, build_service
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final
from tests.agent.conftest import wait_until

__all__ = ["harness_factory"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NO_HICACHE = ("--mem-fraction-static", "0.7")
EATEN_GB = 40.0
LEFT_GB = 60 - 5 - 2 * (150_001 * 35_136) / 1e9  # after ready, before the eater: 44.46 GB


@pytest.fixture
def eater() -> Iterator[Callable[[dict[str, str]], subprocess.Popen[str]]]:
    """Start a process holding EATEN_GB of the simulated host's RAM (waits until it holds it)."""
    started: list[subprocess.Popen[str]] = []

    def start(env: dict[str, str]) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.sim.stray", "--ram-gb", str(EATEN_GB)],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once it holds the RAM
        assert "host RAM" in line, line
        return process

    yield start
    for process in started:
        process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def notices(service: AgentService) -> list[dict[str, Any]]:
    body = service.status()["memory_watch"]
    assert body is not None
    return list(body["notices"])


def headroom_gb(service: AgentService) -> float | None:
    sample = service.watch.last_sample
    return None if sample is None else sample.headroom_bytes / 1e9


def test_ram_eaten_after_ready_twice_raises_exactly_two_notices(
    harness_factory: Callable[..., Harness],
    eater: Callable[[dict[str, str]], subprocess.Popen[str]],
) -> None:
    """Ready at ratio 1 with no notice; RAM eaten below the floor: one notice with the figures
    and a problem in status; given back: below_floor clears, no new notice; eaten again: the
    second notice, and no more however long it stays low; the server is never restarted."""
    harness = harness_factory(sim_command(free_port(), *NO_HICACHE))
    pid = harness.start_server()
    control, state, client = harness.parts()
    service = build_service(
        harness.settings, control=control, state=state, sglang=client, watch_interval_s=0.1
    )
    harness.managers.append(service.manager)
    try:
        service.resume()  # starts the watch
        op = service.submit("resize", actor="ana", ratio=1)
        final = wait_final(service.manager, op.id)
        assert final.state == "ready", service.manager.state.events(op.id)[-1].message
        new_pid = control.status().main_pid
        # The new server's pool pinned: the watch samples the host at 44.5 GB, above the floor.
        wait_until(lambda: headroom_gb(service) == pytest.approx(LEFT_GB, abs=0.05), 20)
        assert notices(service) == []

        first = eater(dict(harness.settings.env))
        wait_until(lambda: len(notices(service)) == 1, timeout_s=20)
        notice = notices(service)[0]
        assert notice["headroom_gb"] == pytest.approx(LEFT_GB - EATEN_GB, abs=0.05)
        assert notice["floor_gb"] == 10.74
        assert notice["server_pid"] == new_pid
        assert f"fell to {LEFT_GB - EATEN_GB:.1f} GB" in notice["message"]
        status = service.status()
        assert status["memory_watch"]["below_floor"] is True
        assert any("below the guard's floor" in p for p in status["problems"])

        first.kill()
        first.wait(timeout=30)
        wait_until(lambda: not service.status()["memory_watch"]["below_floor"], timeout_s=20)
        assert len(notices(service)) == 1

        eater(dict(harness.settings.env))
        wait_until(lambda: len(notices(service)) == 2, timeout_s=20)
        time.sleep(1.0)  # ten more turns under the floor: still two
        assert [n["seq"] for n in notices(service)] == [1, 2]
        assert control.status().main_pid == new_pid  # never restarted
        assert new_pid != pid
        assert len(service.recent(10)) == 1  # the resize alone
    finally:
        service.watch.stop()
