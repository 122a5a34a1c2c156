"""Tests for the short-lived keeping of a process tree's members (what /v1/status scans)."""

from __future__ import annotations

import subprocess

import psutil
import pytest

from bot.agent.host._tree_cache import TreeMembers
from bot.agent.host.system import SystemProbe
from tests.agent.conftest import PYTHON, Spawn, wait_until


class StepClock:
    """A monotonic clock that only moves when the test moves it."""

    def __init__(self) -> None:
        self.at = 1000.0

    def monotonic(self) -> float:
        return self.at


class CountingScan:
    """A process table whose every scan is counted; ``trees`` says what each root holds."""

    def __init__(self, trees: dict[int, set[int]]) -> None:
        self.trees = trees
        self.scans: list[int] = []

    def __call__(self, pid: int) -> set[int]:
        self.scans.append(pid)
        return set(self.trees.get(pid, set()))


def test_two_calls_inside_the_ttl_scan_once() -> None:
    """The second call 1.9 s after the first (TTL 2 s) returns the same members without a scan."""
    clock, scan = StepClock(), CountingScan({42: {42, 43, 44}})
    members = TreeMembers(scan, clock.monotonic, ttl_s=2.0)
    assert members.members(42) == {42, 43, 44}
    clock.at += 1.9
    assert members.members(42) == {42, 43, 44}
    assert scan.scans == [42]


def test_a_call_at_the_ttl_scans_again_and_sees_a_new_child() -> None:
    """At exactly the TTL the tree is scanned again, so a child born since is counted."""
    clock, scan = StepClock(), CountingScan({42: {42}})
    members = TreeMembers(scan, clock.monotonic, ttl_s=2.0)
    assert members.members(42) == {42}
    scan.trees[42] = {42, 43}
    clock.at += 2.0
    assert members.members(42) == {42, 43}
    assert scan.scans == [42, 42]


def test_another_root_pid_is_scanned_at_once() -> None:
    """A new server (another root pid) is never answered with the old tree's members."""
    clock, scan = StepClock(), CountingScan({42: {42, 43}, 77: {77}})
    members = TreeMembers(scan, clock.monotonic, ttl_s=2.0)
    assert members.members(42) == {42, 43}
    assert members.members(77) == {77}
    assert scan.scans == [42, 77]


def test_a_clock_gone_backwards_scans_again() -> None:
    """A monotonic reading before the scan (another clock, a test's reset) is not taken as
    inside the TTL."""
    clock, scan = StepClock(), CountingScan({42: {42}})
    members = TreeMembers(scan, clock.monotonic, ttl_s=2.0)
    members.members(42)
    clock.at -= 5.0
    members.members(42)
    assert scan.scans == [42, 42]


@pytest.mark.slow
def test_the_probe_reads_each_members_memory_fresh_inside_the_ttl(spawn: Spawn) -> None:
    """Inside the TTL the tree is not scanned again, but a member's memory is read anew: a real
    child that grows by 200 MB shows in the second reading, taken at the same clock time."""
    grower = spawn(
        PYTHON,
        "-c",
        "import sys, time\n"
        "sys.stdin.readline()\n"
        "block = b'x' * (200 * 1000**2)\n"
        "print('grown', flush=True)\n"
        "time.sleep(60)\n",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    clock = StepClock()
    probe = SystemProbe(clock=clock)  # a StepClock has the monotonic() the probe reads
    process = psutil.Process(grower.pid)
    wait_until(lambda: process.memory_info().rss > 0)
    before = probe.released_by_stop(grower.pid, probe.ram())
    assert grower.stdin is not None
    assert grower.stdout is not None
    grower.stdin.write(b"go\n")
    grower.stdin.flush()
    assert grower.stdout.readline().strip() == b"grown"
    after = probe.released_by_stop(grower.pid, probe.ram())
    assert after - before >= 190 * 1000**2, (before, after)
