"""The startup guard end to end: the real simulator as the server (process backend), its shared
host state as the host (SimProbe), real SQLite state, the agent's own planner.

small-2gpu: 60 GB available, a server without HiCache holds 5 GB (1 + 2 x 2); at
``--mem-fraction-static 0.7`` the device pool is 150,000 tokens of 35,136 B (the profile).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bot.sim import load_profile, read_host_state
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final
from tests.agent.conftest import Spawn, wait_until

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

NO_HICACHE = ("--mem-fraction-static", "0.7")
DEVICE_TOKENS = 150_000
BYTES_PER_TOKEN = 35_136
RANKS = 2
AVAILABLE = 60e9
SERVER_RAM = 5e9  # the profile's main process and two ranks
RESERVE = 10 * 1024**3  # SGLang's reserve: the plan's, and the guard's default floor


def pool_gb(ratio: float, factor: int = 1) -> float:
    """SGLang's rule (docs/sglang.md): int(device x ratio) tokens + one page, per rank."""
    return (int(DEVICE_TOKENS * ratio) + 1) * factor * BYTES_PER_TOKEN / 1e9


@dataclass
class HostWatch:
    """Samples the simulated host every 10 ms: lowest RAM available, most held by servers."""

    state_dir: Path
    lowest_available: float = float("inf")
    most_held: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        profile = load_profile("small-2gpu")
        while not self.stop.is_set():
            snapshot = read_host_state(profile, self.state_dir)
            self.lowest_available = min(self.lowest_available, snapshot.ram_available_bytes)
            held = sum(s.host_bytes for s in snapshot.servers)
            self.most_held = max(self.most_held, held)
            time.sleep(0.01)


@pytest.fixture
def host_watch(tmp_path: Path) -> Iterator[HostWatch]:
    watch = HostWatch(tmp_path / "sim")
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    yield watch
    watch.stop.set()
    thread.join(5)


def test_a_pool_twice_the_plan_is_killed_before_the_pin_ends_and_rolled_back(
    harness_factory: Callable[..., Harness], host_watch: HostWatch
) -> None:
    """Ratio 3 plans 15.81 GB x 2 = 31.6 GB within the 49.3 GB budget; SGLang allocating twice
    that (host_pool_x:2, 63.2 GB, more than the host has) is killed on its first Allocating
    line: host_pool_over_budget with both figures, rolled back to ready, and the host's RAM
    never fell below the floor (SGLang's 10 GiB reserve)."""
    harness = harness_factory(
        sim_command(free_port(), *NO_HICACHE),
        extra_env={"KIMI_SIM_FAIL": "host_pool_x:2,slow_pin:10"},  # the pin: ~3.2 s here
    )
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=3)
    assert op.plan is not None
    assert op.plan["budget_bytes"] == pytest.approx(AVAILABLE - RESERVE, abs=1e3)
    assert any("startup guard on" in note for note in op.plan["notes"])
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "rolled_back", events[-1].message
    assert final.failure is not None
    failure = final.failure
    assert failure["kind"] == "host_pool_over_budget"
    # The plan's figure (its bytes per token from the logged GiB, taken at the top) is SGLang's
    # rule within a few hundredths of a GB.
    assert failure["planned_total_gb"] == pytest.approx(op.plan["total_bytes"] / 1e9, abs=0.01)
    assert failure["planned_total_gb"] == pytest.approx(RANKS * pool_gb(3), rel=0.005)
    assert failure["logged_total_gb"] == pytest.approx(RANKS * pool_gb(3, 2), abs=0.02)
    assert len(failure["lines"]) == 1  # the first rank's line: acted on at once
    assert f"Allocating {pool_gb(3, 2):.2f} GB host memory" in failure["lines"][0]
    # Back to the config without HiCache, and the host never below the floor.
    info = harness.parts()[2].server_info()
    assert info is not None
    assert not info["enable_hierarchical_cache"]
    assert host_watch.lowest_available >= RESERVE
    pinned = host_watch.most_held - SERVER_RAM  # the new server's own RAM aside
    print(
        f"guard: pinned at most {max(0.0, pinned) / 1e9:.1f} GB of "
        f"{RANKS * pool_gb(3, 2):.1f} GB when killed; lowest available "
        f"{host_watch.lowest_available / 1e9:.1f} GB"
    )
    assert host_watch.most_held < SERVER_RAM + RANKS * pool_gb(3, 2) * 1e9


def test_a_start_within_budget_is_untouched(
    harness_factory: Callable[..., Harness], host_watch: HostWatch
) -> None:
    """Ratio 1 (5.27 GB x 2) with the pool as planned: ready, no failure, its pools pinned."""
    harness = harness_factory(sim_command(free_port(), *NO_HICACHE))
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=1)
    final = wait_final(manager, op.id)
    assert final.state == "ready", manager.state.events(op.id)[-1].message
    assert final.failure is None
    assert host_watch.most_held >= SERVER_RAM + RANKS * pool_gb(1) * 1e9


def test_the_watchdog_stops_a_start_when_another_process_eats_the_ram(
    harness_factory: Callable[..., Harness], spawn: Spawn
) -> None:
    """While the start pins, a second simulated process on the same host takes 52 GB: the
    watchdog kills the start (host_ram_floor), then the rollback's start too (60 - 52 = 8 GB
    left, below the floor, before that server takes any), and the server is left stopped."""
    harness = harness_factory(
        sim_command(free_port(), *NO_HICACHE),
        extra_env={"KIMI_SIM_FAIL": "slow_pin:300"},  # 10.5 GB pinned over ~16 s
    )
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=1)

    def pinning() -> bool:
        return any("host_pool" in e.phase for e in manager.state.events(op.id))

    wait_until(pinning, timeout_s=60)
    env = {**os.environ, **harness.settings.env}
    spawn(sys.executable, "-m", "bot.sim.stray", "--ram-gb", "52", env=env,
          stdout=subprocess.DEVNULL)  # fmt: skip
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", [(e.phase, e.message) for e in events]
    assert final.failure is not None
    assert final.failure["kind"] == "host_ram_floor"
    assert final.failure["room_gb"] < RESERVE / 1e9
    assert "the rollback failed too" in events[-1].message
    assert events[-1].data["cause"]["kind"] == "host_ram_floor"
    assert not harness.parts()[0].status().running


def test_with_the_guard_off_the_same_start_pins_until_the_host_runs_out(
    harness_factory: Callable[..., Harness], host_watch: HostWatch
) -> None:
    """``guard = false``: the plan says the start is not guarded, and the same twice-sized
    pool pins on until the host's RAM is gone (the simulated kernel kills it), far below the
    floor the guard keeps: what the guard prevents."""
    harness = harness_factory(
        sim_command(free_port(), *NO_HICACHE),
        extra_env={"KIMI_SIM_FAIL": "host_pool_x:2,slow_pin:10"},
        guard=False,
    )
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=3)
    assert op.plan is not None
    assert any("startup guard off" in note for note in op.plan["notes"])
    final = wait_final(manager, op.id)
    assert final.failure is not None
    assert final.failure["kind"] != "host_pool_over_budget"
    assert host_watch.lowest_available < RESERVE
    pinned = host_watch.most_held - SERVER_RAM
    print(
        f"no guard: pinned {pinned / 1e9:.1f} GB of {RANKS * pool_gb(3, 2):.1f} GB before the "
        f"kernel's kill; lowest available {host_watch.lowest_available / 1e9:.1f} GB"
    )
