"""Tests for waiting until the GPUs are free after a stop.

A scripted probe stands in for NVML: there is no GPU on a test machine, and the point is to
drive a sequence of GPU states (processes draining one poll at a time). A fake clock makes the
waits instant and the waited seconds exact.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import pytest

from bot.agent.engine.gpu_wait import wait_for_gpus_free
from bot.agent.host.probe import GpuFacts, GpuInfo, GpuProcess, ProcessInfo, RamFacts, ServerCgroup
from bot.errors import GpusBusyError

GB = 10**9


class FakeClock:
    """A clock that advances only when slept on."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.t, UTC)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


class ScriptedProbe:
    """Answers gpus() from a list of states, repeating the last one (no GPU here)."""

    def __init__(
        self, states: list[GpuFacts], strays: list[list[ProcessInfo]] | None = None
    ) -> None:
        self.states = states
        self.stray_states = strays or [[]]
        self.calls = 0
        self.stray_calls = 0

    def ram(self, server: ServerCgroup | None = None) -> RamFacts:
        return RamFacts(449 * GB, 400 * GB)

    def gpus(self) -> GpuFacts:
        state = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        return state

    def released_by_stop(self, pid: int, ram: RamFacts) -> int:
        return 0

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        excluded = set(exclude_pids)
        strays = self.stray_states[min(self.stray_calls, len(self.stray_states) - 1)]
        self.stray_calls += 1
        return [s for s in strays if s.pid not in excluded]


def _facts(*per_gpu: list[GpuProcess]) -> GpuFacts:
    return GpuFacts(
        available=True,
        gpus=tuple(
            GpuInfo(i, "H200", 141 * GB, sum(p.used_bytes for p in procs), tuple(procs))
            for i, procs in enumerate(per_gpu)
        ),
    )


SCHED0 = GpuProcess(4101, "sglang::scheduler_TP0", 120 * GB)
SCHED1 = GpuProcess(4102, "sglang::scheduler_TP1", 120 * GB)


def test_returns_at_once_when_gpus_are_already_free() -> None:
    """Free GPUs on the first poll: no wait at all."""
    clock = FakeClock()
    result = wait_for_gpus_free(ScriptedProbe([_facts([], [])]), clock, None, [], 120, 1)
    assert (result.waited_s, result.polls, clock.sleeps) == (0.0, 1, [])


def test_waits_while_processes_drain() -> None:
    """Processes leaving one poll at a time are waited out; waited = polls - 1 intervals."""
    states = [_facts([SCHED0], [SCHED1]), _facts([], [SCHED1]), _facts([], [])]
    clock = FakeClock()
    result = wait_for_gpus_free(ScriptedProbe(states), clock, None, [], 120, 2.0)
    assert result.polls == 3
    assert result.waited_s == 4.0
    assert clock.sleeps == [2.0, 2.0]


def test_only_the_named_gpus_are_watched() -> None:
    """A process on a GPU outside gpu_indices does not hold the wait."""
    clock = FakeClock()
    result = wait_for_gpus_free(ScriptedProbe([_facts([], [SCHED1])]), clock, [0], [], 120, 1)
    assert result.waited_s == 0.0


def test_excluded_pids_do_not_count() -> None:
    """A pid in exclude_pids is not waited for."""
    clock = FakeClock()
    result = wait_for_gpus_free(ScriptedProbe([_facts([SCHED0])]), clock, None, [4101], 10, 1)
    assert result.polls == 1


def test_timeout_names_every_holder_and_stray() -> None:
    """After the timeout the error names each PID, its name, GPUs and memory, and strays."""
    stray = ProcessInfo(4200, "sglang::detokenizer", ("sglang::detokenizer",))
    probe = ScriptedProbe([_facts([SCHED0], [SCHED0, SCHED1])], strays=[[stray]])
    clock = FakeClock()
    with pytest.raises(GpusBusyError) as caught:
        wait_for_gpus_free(probe, clock, None, [], 10, 3)
    message = str(caught.value)
    assert "PID 4101 (sglang::scheduler_TP0) on GPU 0,1 holding 240.0 GB" in message
    assert "PID 4102 (sglang::scheduler_TP1) on GPU 1 holding 120.0 GB" in message
    assert "PID 4200 (sglang::detokenizer), a stray SGLang process" in message
    assert [p["pid"] for p in caught.value.processes] == [4101, 4102, 4200]
    # polls at 0, 3, 6, 9, then one last at the 10 s deadline
    assert clock.sleeps == [3, 3, 3, 1]


def test_no_gpu_facts_returns_at_once_with_a_note() -> None:
    """Without NVML and with no stray process there is nothing to wait on: return and say so."""
    facts = GpuFacts(available=False, reason="no NVML library on this host")
    clock = FakeClock()
    result = wait_for_gpus_free(ScriptedProbe([facts]), clock, None, [], 120, 1)
    assert result.waited_s == 0.0
    assert result.note is not None
    assert "no NVML library" in result.note


def test_stray_schedulers_are_waited_out_even_without_gpu_memory() -> None:
    """An orphaned sglang::scheduler alive after the stop holds the start until it exits."""
    stray = ProcessInfo(4300, "sglang::scheduler_TP3", ())
    clock = FakeClock()
    probe = ScriptedProbe([_facts([])], strays=[[stray], [stray], []])
    result = wait_for_gpus_free(probe, clock, None, [], 10, 1)
    assert result.polls == 3
    assert clock.sleeps == [1, 1]


def test_a_stray_that_never_exits_fails_the_wait_without_nvml() -> None:
    """With no GPU facts, a stray scheduler still blocks, and the error names its PID."""
    facts = GpuFacts(available=False, reason="no NVML library on this host")
    stray = ProcessInfo(4300, "sglang::scheduler_TP3", ())
    with pytest.raises(GpusBusyError, match=r"PID 4300 \(sglang::scheduler_TP3\)"):
        wait_for_gpus_free(ScriptedProbe([facts], strays=[[stray]]), FakeClock(), None, [], 5, 1)
