"""The startup guard's logic on a fake clock: host pools against the plan's budget, the RAM
watchdog's sampling and floor, and the follower killing a tripped start.

No subprocess and no sleeping: the follower runs on the fake clock and scripted log of
``test_follower``; host RAM comes from a scripted ``HostProbe`` (psutil and the simulator's host
are covered by ``test_guard_sim.py``), and the control double records the SIGKILL it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.agent.cmdline import HiCacheSetting
from bot.agent.config import DEFAULT_GUARD_FLOOR_GB, GuardSettings, agent_settings_from_config
from bot.agent.control.protocol import ServerProcessState, StopResult
from bot.agent.engine.context import RunnerContext, StartOutcome
from bot.agent.engine.follower import StartFollower
from bot.agent.engine.guard import PoolBudget, StartGuard, guard_note
from bot.agent.engine.progress import ProgressModel
from bot.agent.engine.watcher import StartFigures, StartWatcher
from bot.agent.host.probe import GpuFacts, ProcessInfo, RamFacts, ServerCgroup
from bot.agent.state.agent_state import AgentState
from bot.errors import ConfigError, RamProbeError
from bot.vocab import FailureKind, OperationState, ServerState
from tests.agent.engine.test_follower import (
    HOST,
    HTTP,
    INIT,
    KV,
    READY,
    T0,
    FakeClock,
    Recorder,
    ScriptedLog,
    ScriptedSGLang,
)

GB = 1e9
GIB = 1024**3
RANKS = 8
# The field notes' host pool line: 44.77 GB per rank, 8 ranks.
LOGGED_TOTAL = 44.77 * GB * RANKS  # 358.16 GB
INDEXER = "[2026-02-24 11:24:02 TP0] Allocating 29.02 GB host memory for DSA indexer " \
          "(layout=page_first).\n"  # fmt: skip


@dataclass
class ScriptedProbe:
    """Host RAM as a script: ``(from second, available bytes)``; every read is recorded."""

    clock: FakeClock
    available: Sequence[tuple[float, int]]
    cgroup: tuple[int, int] | None = None  # (limit, used)
    fail: bool = False
    reads: list[float] = field(default_factory=list)

    def ram(self, server: ServerCgroup | None = None) -> RamFacts:
        self.reads.append(self.clock.t)
        if self.fail:
            raise RamProbeError("psutil could not read host memory: [Errno 5] I/O error")
        value = [bytes_ for at, bytes_ in self.available if at <= self.clock.t][-1]
        limit, used = self.cgroup if self.cgroup else (None, None)
        return RamFacts(500 * GB, value, limit, used)  # type: ignore[arg-type]

    def gpus(self) -> GpuFacts:
        raise AssertionError("the guard reads no GPU facts")

    def released_by_stop(self, pid: int, ram: RamFacts) -> int:
        raise AssertionError("the guard reads no process trees")

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        raise AssertionError("the guard looks for no strays")


@dataclass
class KillableControl:
    """The server: alive (pid 4242) until killed; ``kills`` records the second of each kill."""

    clock: FakeClock
    kills: list[float] = field(default_factory=list)
    name: str = "fake"

    def status(self) -> ServerProcessState:
        if self.kills:
            return ServerProcessState(ServerState.FAILED, None, 137, T0)
        return ServerProcessState(ServerState.RUNNING, 4242, None, T0)

    def kill(self) -> StopResult:
        self.kills.append(self.clock.t)
        return StopResult("killed", 0.2, 137)

    def stop(self, grace_s: float) -> StopResult:
        raise AssertionError("a tripped start is killed, never stopped with a grace")


def _budget(total_gb: float, kv_gb: float, **extras: float) -> PoolBudget:
    """A plan's budget as ``Plan.to_dict()`` stores it (bytes)."""
    plan = {
        "budget_bytes": total_gb * GB,
        "per_rank_bytes": int(kv_gb * GB),
        "host_extra_bytes_per_rank": {name: int(gb * GB) for name, gb in extras.items()},
    }
    budget = PoolBudget.from_plan(plan)
    assert budget is not None
    return budget


def _figures(text: str) -> StartFigures:
    watcher = StartWatcher(ProgressModel(None), RANKS)
    watcher.feed(text, 0.0)
    return watcher.figures


def _guard(
    clock: FakeClock,
    budget: PoolBudget | None,
    available: Sequence[tuple[float, int]] = ((0, 400 * 10**9),),
    **probe: Any,
) -> tuple[StartGuard, ScriptedProbe]:
    scripted = ScriptedProbe(clock, available, **probe)
    settings = GuardSettings(enabled=True, interval_s=0.5, floor_gb=DEFAULT_GUARD_FLOOR_GB)
    return StartGuard(settings, scripted, budget, RANKS), scripted


def test_a_logged_pool_over_the_budget_trips_with_both_figures_and_the_line() -> None:
    """44.77 GB x 8 logged against a 300 GB budget planned at 30 GB per rank trips
    host_pool_over_budget with the planned (240 GB) and logged (358.16 GB) totals and the line."""
    guard, _ = _guard(FakeClock(), _budget(300, 30))
    trip = guard.check(_figures(HOST), 0.0)
    assert trip is not None
    assert trip.kind is FailureKind.HOST_POOL_OVER_BUDGET
    assert trip.data["logged_total_gb"] == pytest.approx(LOGGED_TOTAL / GB)
    assert trip.data["planned_total_gb"] == pytest.approx(30 * RANKS)
    assert trip.data["budget_gb"] == 300
    assert trip.lines == (HOST.strip(),)
    assert "358.2 GB" in trip.message
    assert "300.0 GB" in trip.message


def test_a_logged_pool_within_the_budget_passes() -> None:
    """The same line against a 400 GB budget does not trip, nor does a pool the plan put exactly
    at the budget that the log rounds up by a hundredth of a GB."""
    guard, _ = _guard(FakeClock(), _budget(400, 44.77))
    assert guard.check(_figures(HOST), 0.0) is None
    exact = 44.7651 * GB * RANKS  # logged as 44.77 (two decimals): not over
    guard, _ = _guard(FakeClock(), _budget(exact / GB, 44.7651))
    assert guard.check(_figures(HOST), 0.0) is None


def test_an_extra_pool_not_yet_logged_counts_at_the_plans_figure() -> None:
    """With a 29.02 GB/rank DSA indexer planned, the KV line alone already trips a 500 GB
    budget: (44.77 + 29.02) x 8 = 590.3 GB; without the indexer planned it would pass."""
    guard, _ = _guard(FakeClock(), _budget(500, 40, **{"DSA indexer": 29.02}))
    trip = guard.check(_figures(HOST), 0.0)
    assert trip is not None
    assert trip.data["logged_total_gb"] == pytest.approx((44.77 + 29.02) * RANKS)
    guard, _ = _guard(FakeClock(), _budget(500, 40))
    assert guard.check(_figures(HOST), 0.0) is None


def test_a_second_pool_logged_later_trips_when_the_sum_goes_over() -> None:
    """A rollback's guard (the budget, no planned pools) passes the KV line under a 400 GB budget
    and trips once the indexer's line brings the sum to 590.3 GB, quoting both lines."""
    plan = {"budget_bytes": 400 * GB, "per_rank_bytes": 1, "host_extra_bytes_per_rank": {}}
    budget = PoolBudget.from_plan(plan, with_pools=False)
    assert budget is not None
    assert dict(budget.planned_per_rank) == {}
    guard, _ = _guard(FakeClock(), budget)
    watcher = StartWatcher(ProgressModel(None), RANKS)
    watcher.feed(HOST, 0.0)
    assert guard.check(watcher.figures, 0.0) is None
    watcher.feed(INDEXER, 0.1)
    trip = guard.check(watcher.figures, 0.1)
    assert trip is not None
    assert trip.data["logged_gb_per_rank"] == {"kv": 44.77, "DSA indexer": 29.02}
    assert trip.lines == (HOST.strip(), INDEXER.strip())


def test_without_a_plan_only_the_watchdog_guards() -> None:
    """No stored plan (HiCache off) gives no budget: a huge pool line does not trip."""
    assert PoolBudget.from_plan(None) is None
    guard, _ = _guard(FakeClock(), None)
    assert guard.check(_figures(HOST), 0.0) is None


def test_the_watchdog_samples_once_per_interval_and_trips_below_the_floor() -> None:
    """RAM is read at most every 0.5 s; available falling to 9 GB (below SGLang's 10 GiB
    reserve, 10.74 GB) trips host_ram_floor on the first read after it fell."""
    clock = FakeClock()
    guard, probe = _guard(clock, None, [(0, 200 * 10**9), (3.0, 9 * 10**9)])
    figures = StartFigures()
    trip = None
    while trip is None and clock.t < 10:
        trip = guard.check(figures, clock.t)
        clock.sleep(0.1)
    assert trip is not None
    assert trip.kind is FailureKind.HOST_RAM_FLOOR
    assert 3.0 <= probe.reads[-1] < 3.0 + 0.5
    gaps = [b - a for a, b in zip(probe.reads, probe.reads[1:], strict=False)]
    assert all(gap >= 0.5 - 1e-9 for gap in gaps)
    assert trip.data["room_gb"] == 9.0
    assert trip.data["floor_gb"] == pytest.approx(10 * GIB / GB, abs=0.01)


def test_the_watchdog_counts_the_cgroups_room_when_it_is_less() -> None:
    """Plenty available on the host, but a cgroup limit of 100 GB with 95 GB used leaves 5 GB:
    the floor trips, saying it is the cgroup."""
    guard, _ = _guard(FakeClock(), None, cgroup=(100 * 10**9, 95 * 10**9))
    trip = guard.check(StartFigures(), 0.0)
    assert trip is not None
    assert trip.kind is FailureKind.HOST_RAM_FLOOR
    assert trip.data["room_gb"] == 5.0
    assert "in the cgroup" in trip.message


def test_a_failing_ram_probe_does_not_stop_a_start() -> None:
    """A probe error is no evidence of low RAM: the guard does not trip on it."""
    guard, probe = _guard(FakeClock(), None, fail=True)
    assert guard.check(StartFigures(), 0.0) is None
    assert probe.reads == [0.0]


# -- through the follower ---------------------------------------------------------------------


@pytest.fixture
def follow(tmp_path: Path) -> Any:
    """Run a follower with a guard over the doubles; returns (outcome, control, probe)."""
    states: list[AgentState] = []

    def run(
        lines: Sequence[tuple[float, str]],
        budget: PoolBudget | None,
        available: Sequence[tuple[float, int]] = ((0, 400 * 10**9),),
        healthy_at: float | None = None,
    ) -> tuple[StartOutcome, KillableControl, ScriptedProbe]:
        clock = FakeClock()
        control = KillableControl(clock)
        guard, probe = _guard(clock, budget, available)
        section = {"command": ["python3", "-m", "sglang.launch_server", "--tp-size", "8"],
                   "state_dir": str(tmp_path / "agent"), "poll_interval_s": 1.0,
                   "hard_ceiling_s": 300.0}  # fmt: skip
        state = AgentState(tmp_path / "agent")
        states.append(state)
        ctx = RunnerContext(
            settings=agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "t"}),
            control=control,  # type: ignore[arg-type]
            probe=probe,
            sglang=ScriptedSGLang(clock, healthy_at),
            state=state,
            clock=clock,
            health_grace_s=20.0,
        )
        watcher = StartWatcher(ProgressModel(44.77), RANKS, ratio=4.0, page_size=1)
        follower = StartFollower(
            ctx, Recorder(clock), watcher, HiCacheSetting(True, ratio=4), 4242, T0,
            lambda: OperationState.RUNNING, guard,
        )  # fmt: skip
        return follower.run(ScriptedLog(clock, lines)), control, probe

    yield run
    for state in states:
        state.close()


def test_the_follower_kills_at_the_first_pool_line_over_budget(follow: Callable[..., Any]) -> None:
    """The host pool line at 20 s over a 300 GB budget: killed on the follower's next turn
    (within 0.1 s), failed host_pool_over_budget with both figures, the line and the kill."""
    outcome, control, _ = follow([(0, INIT), (10, KV), (20, HOST), (60, HTTP)], _budget(300, 30))
    assert len(control.kills) == 1
    assert 20.0 <= control.kills[0] <= 20.1 + 1e-9
    assert not outcome.ready
    assert outcome.data["kind"] == FailureKind.HOST_POOL_OVER_BUDGET
    assert outcome.data["logged_total_gb"] == pytest.approx(LOGGED_TOTAL / GB)
    assert outcome.data["planned_total_gb"] == pytest.approx(240)
    assert outcome.data["lines"] == [HOST.strip()]
    assert outcome.data["exit_status"] == 137


def test_the_follower_kills_when_ram_falls_below_the_floor(follow: Callable[..., Any]) -> None:
    """Another process eats the RAM at 30 s: the start is killed within one interval (0.5 s)
    and fails host_ram_floor."""
    outcome, control, _ = follow([(0, INIT), (10, KV)], None, [(0, 300 * 10**9), (30.0, 8 * 10**9)])
    assert len(control.kills) == 1
    assert 30.0 <= control.kills[0] <= 30.5 + 1e-9
    assert outcome.data["kind"] == FailureKind.HOST_RAM_FLOOR


def test_a_start_under_budget_and_above_the_floor_is_untouched(follow: Callable[..., Any]) -> None:
    """Pools within a 400 GB budget and RAM above the floor: ready, never killed, RAM sampled
    all along (every 0.5 s, on the follower's 0.1 s turns)."""
    outcome, control, probe = follow(
        [(0, INIT), (10, KV), (20, HOST), (40, HTTP), (41, READY)], _budget(400, 44.77),
        healthy_at=42.0,
    )  # fmt: skip
    assert outcome.ready
    assert control.kills == []
    assert len(probe.reads) >= 42.0 / (0.5 + 0.1)


def test_the_plan_note_says_whether_the_guard_is_on() -> None:
    """On, the note gives the budget, the floor and the interval; off, it says the start is
    not guarded and which key turned it off."""
    on = guard_note(GuardSettings(), 300 * GB)
    assert "guard on" in on
    assert "300.0 GB" in on
    assert "10.7 GB" in on
    assert "0.5 s" in on
    off = guard_note(GuardSettings(enabled=False), 300 * GB)
    assert "guard off" in off
    assert "[agent] guard = false" in off


def test_the_guard_keys_are_read_and_bad_values_refused() -> None:
    """``guard``, ``guard_interval_s`` and ``guard_floor_gb`` are read; defaults are on, 0.5 s
    and SGLang's 10 GiB; a zero interval, a negative floor or a non-boolean switch is refused."""

    def settings(**keys: Any) -> GuardSettings:
        section = {"command": ["python3"], **keys}
        return agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "t"}).guard

    assert settings() == GuardSettings(True, 0.5, 10 * GIB / GB)
    assert settings(guard=False, guard_interval_s=2, guard_floor_gb=20) == GuardSettings(
        False, 2.0, 20.0
    )
    for bad, words in (
        ({"guard_interval_s": 0}, "guard_interval_s"),
        ({"guard_floor_gb": -1}, "guard_floor_gb"),
        ({"guard": "yes"}, "guard"),
    ):
        with pytest.raises(ConfigError, match=words):
            settings(**bad)
