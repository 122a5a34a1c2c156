"""Host RAM eaten by another process during a start applied from Slack: the guard's watchdog
stops the start, the host comes back above the floor and stays there, the rollback runs as
usual, and the proposal's message ends ROLLED BACK naming the floor.

small-2gpu (the profile): 60 GB available; a server holds 5 GB of its own (1 + 2 ranks x 2);
at ``--mem-fraction-static 0.7`` the device pool is 150,000 tokens of 35,136 B. The server runs
without HiCache; the resize to ratio 1 pins 2 x 5.27 GB, slowly (``slow_pin``). Once its start
begins, another process on the simulated host takes 38 GB (``python -m bot.sim.stray``): 60 - 5
- 38 = 17 GB are left before the pin, above the guard's floor (SGLang's 10 GiB reserve, 10.74 GB)
and above SGLang 0.5.9's per-rank check; the pin then takes the host below the floor once 6.26
of its 10.54 GB are pinned. The whole pin would leave 6.46 GB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.sim import load_profile, read_host_state
from bot.vocab import EventPhase, FailureKind, OperationState
from tests.chaos._agent_rig import BASE_FLAGS, PROFILE
from tests.chaos._agreement import check_agreement
from tests.chaos._bot_driver import proposal_id
from tests.chaos._host_bot import host_bot_rig
from tests.slack._harness import ANA, BEN, text_of, wait_until

# Real processes throughout: minutes under a load of 15 on 2 cores, still bounded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GB = 1e9
AVAILABLE = 60e9
SERVER_RAM = 5e9
FLOOR = 10 * 1024**3  # the guard's default floor: SGLang's reserve
STRAY = 38e9
# SGLang's rule (docs/sglang.md): int(device tokens x ratio) + one page, per rank, x 2 ranks.
POOL = (int(150_000 * 1.0) + 1) * 35_136 * 2


@dataclass
class HostSampler:
    """Samples the simulated host's available RAM every 10 ms, with the monotonic time."""

    state_dir: Path
    samples: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        profile = load_profile(PROFILE)
        while not self.stop.is_set():
            snapshot = read_host_state(profile, self.state_dir)
            self.samples.append((time.monotonic(), float(snapshot.ram_available_bytes)))
            time.sleep(0.01)

    def lowest(self, since: float = 0.0) -> float:
        return min(available for at, available in self.samples if at >= since)


@contextmanager
def sampling(state_dir: Path) -> Iterator[HostSampler]:
    """A sampler of the simulated host in ``state_dir``, running until the block ends."""
    watch = HostSampler(state_dir)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        watch.stop.set()
        thread.join(10)


@pytest.fixture
def stray() -> Iterator[Callable[[dict[str, str]], None]]:
    """Start the RAM-eating process once (waiting until it holds its RAM); killed afterwards."""
    started: list[subprocess.Popen[str]] = []

    def start(env: dict[str, str]) -> None:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.sim.stray", "--ram-gb", str(STRAY / GB)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once it holds the RAM; "" if it died
        assert "host RAM" in line, line

    yield start
    for process in started:
        process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def _phase(name: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(event["phase"] == name for event in events)


def test_ram_eaten_mid_start_is_stopped_by_the_guard_and_rolled_back(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stray: Callable[[dict[str, str]], None],
) -> None:
    """The start of ratio 1, applied from Slack, is stopped with host_ram_floor (the RAM it saw
    below the floor), its pin cut short, the host back above the floor from the rollback on
    (sampled every 10 ms), and the server rolled back to its config without HiCache, each
    config started once; the message ends ROLLED BACK naming the floor, and store, agent and
    Slack agree."""
    with (
        host_bot_rig(
            tmp_path, monkeypatch, "process", BASE_FLAGS, sim_env={"KIMI_SIM_FAIL": "slow_pin:500"}
        ) as rig,
        sampling(rig.host.tmp / "sim-host") as sampler,
    ):
        agent = rig.agent
        old = rig.host.command_on_disk()
        starts = rig.host.starts()
        rig.begin()
        posted = rig.propose(BEN, "resize ratio 1")
        rig.click_apply(proposal_id(posted), ANA)
        wait_until(lambda: len(rig.agent_operations()) == 1, what="the operation at the agent")
        (operation,) = rig.agent_operations()
        op_id = operation["id"]
        assert "startup guard on" in " ".join(operation["plan"]["notes"])

        agent.follow(op_id, until=_phase(EventPhase.STARTING))
        stray({**os.environ, **rig.host.settings.env})
        _, events = agent.follow(op_id, until=_phase(EventPhase.ROLLING_BACK))
        rolling_back_seen = time.monotonic()
        final, rest = agent.follow(op_id)
        events += rest
        phases = [event["phase"] for event in events]

        assert final["state"] == OperationState.ROLLED_BACK, phases
        failure = final["operation"]["failure"]
        assert failure["kind"] == FailureKind.HOST_RAM_FLOOR, failure
        assert failure["room_gb"] < FLOOR / GB
        assert failure["floor_gb"] == pytest.approx(FLOOR / GB, abs=0.01)
        info = rig.host.server_info()
        assert info is not None
        assert not info["enable_hierarchical_cache"]
        assert rig.host.starts() == starts + 2, "the resize and the rollback, once each"

        whole_pin = AVAILABLE - SERVER_RAM - STRAY - POOL
        lowest = sampler.lowest()
        assert lowest > whole_pin, f"the pin ran to its end: {lowest / GB:.2f} GB left"
        after = sampler.lowest(since=rolling_back_seen)
        assert after >= FLOOR, f"below the floor after the stop: {after / GB:.2f} GB"
        below = [at for at, available in sampler.samples if available < FLOOR]
        span = below[-1] - below[0] if below else 0.0
        print(
            f"ram eaten: lowest {lowest / GB:.2f} GB (floor {FLOOR / GB:.2f}, whole pin "
            f"{whole_pin / GB:.2f}); below the floor for {span:.2f} s; from the rollback on at "
            f"least {after / GB:.2f} GB"
        )

        shown = text_of(rig.wait_message(posted.ts, "*ROLLED BACK*", timeout_s=120))
        assert f"*ROLLED BACK* ({FailureKind.HOST_RAM_FLOOR})" in shown, shown
        check_agreement(rig)
        rig.host.check(agent, op_id, known=(old,))
        assert agent.stop() == 0
