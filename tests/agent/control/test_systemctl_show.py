"""Tests for reading the unit's memory cgroup from ``systemctl show``: the pure reading, and the
systemd backend against the stand-in ``systemctl`` of ``tests/agent/fake_systemd/``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.agent.control._systemctl_show import server_cgroup, slice_path
from bot.agent.control.systemd import SystemdControl
from bot.agent.host.probe import ServerCgroup
from bot.clock import SystemClock
from bot.errors import BackendError
from tests.agent.conftest import fake_systemd_executables, wait_until

UNIT = "sglang.service"


def test_a_running_unit_is_found_by_its_main_pid() -> None:
    """An active unit's memory is its main process's: its /proc/<pid>/cgroup says where."""
    fields = {
        "ActiveState": "active",
        "MainPID": "4242",
        "ControlGroup": "/system.slice/sglang.service",
        "MemoryMax": "68719476736",
    }
    assert server_cgroup(fields, UNIT) == ServerCgroup(pid=4242)


def test_a_stopped_unit_is_planned_in_its_slice_with_its_limits() -> None:
    """A stopped unit has no ControlGroup: it will start in /<slice>/<unit> with its MemoryMax
    (64 GiB) and no MemoryHigh (infinity)."""
    fields = {
        "ActiveState": "inactive",
        "MainPID": "0",
        "ControlGroup": "",
        "Slice": "system.slice",
        "MemoryMax": "68719476736",
        "MemoryHigh": "infinity",
    }
    assert server_cgroup(fields, UNIT) == ServerCgroup(
        planned_path="/system.slice/sglang.service", planned_max_bytes=68719476736
    )


def test_slice_names_nest_at_each_dash() -> None:
    """systemd nests a-b.slice inside a.slice; -.slice is the root."""
    assert slice_path("system.slice") == "/system.slice"
    assert slice_path("gpu-inference.slice") == "/gpu.slice/gpu-inference.slice"
    assert slice_path("-.slice") == "/"


def test_a_memory_limit_that_is_not_bytes_is_an_error() -> None:
    """MemoryMax=64G as text (not bytes) is refused, naming the property and the value."""
    fields = {"ActiveState": "inactive", "MemoryMax": "64G"}
    with pytest.raises(BackendError, match="MemoryMax='64G'"):
        server_cgroup(fields, UNIT)


@pytest.fixture
def unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SystemdControl]:
    """A stand-in systemd with one unit (MemoryMax 8 GiB, MemoryHigh 6 GiB, in kimi.slice)
    that sleeps; stopped afterwards."""
    units, state = tmp_path / "units", tmp_path / "fake-state"
    units.mkdir()
    state.mkdir()
    (units / UNIT).write_text(
        "[Service]\nSlice=kimi-gpu.slice\nMemoryMax=8589934592\nMemoryHigh=6442450944\n"
        "ExecStart=sleep 60\n"
    )
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(state))
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(units))
    systemctl, journalctl = fake_systemd_executables(tmp_path / "bin")
    control = SystemdControl(
        UNIT, units, [], SystemClock(), systemctl=str(systemctl), journalctl=str(journalctl)
    )
    yield control
    control.stop(grace_s=5)


@pytest.mark.slow
def test_the_systemd_backend_says_where_the_server_is_charged(unit: SystemdControl) -> None:
    """Stopped: the unit's planned cgroup in kimi-gpu.slice with MemoryMax and MemoryHigh from
    systemctl show; running: its main pid."""
    assert unit.cgroup() == ServerCgroup(
        planned_path="/kimi.slice/kimi-gpu.slice/sglang.service",
        planned_max_bytes=8 * 1024**3,
        planned_high_bytes=6 * 1024**3,
    )
    unit.start("test:1")
    wait_until(lambda: unit.status().running)
    pid = unit.status().main_pid
    assert pid is not None
    assert unit.cgroup() == ServerCgroup(pid=pid)
