"""Tests for the probe over the simulator's host."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from bot.agent.config import AgentSettings
from bot.agent.host.sim import SIM_CGROUP, SimProbe
from bot.agent.service import make_probe
from bot.agent.tokens import TokenSet
from bot.settings import Secret
from bot.sim import load_profile
from tests.agent.conftest import Spawn, wait_until

GIB = 1024**3


def test_idle_simulated_host_reports_the_profile(tmp_path: Path) -> None:
    """With no simulator running, RAM and GPUs are the profile's (64/60 GB, 2 x 24 GiB)."""
    probe = SimProbe(load_profile("small-2gpu"), tmp_path)
    ram = probe.ram()
    assert (ram.total_bytes, ram.available_bytes) == (64 * 10**9, 60 * 10**9)
    assert ram.cgroup_limit_bytes is None
    gpus = probe.gpus()
    assert gpus.available
    assert [(g.index, g.memory_total_bytes, g.processes) for g in gpus.gpus] == [
        (0, 24 * GIB, ()),
        (1, 24 * GIB, ()),
    ]
    assert probe.released_by_stop(2**22 + 3, probe.ram()) == 0


@pytest.mark.slow
def test_stray_from_the_simulator_holds_the_gpus(tmp_path: Path, spawn: Spawn) -> None:
    """A simulated stray scheduler shows on the GPUs it claims and as a stray of that simulated
    host, and of no other."""
    env = {"KIMI_SIM_PROFILE": "small-2gpu", "KIMI_SIM_STATE_DIR": str(tmp_path), "PATH": ""}
    stray = spawn(sys.executable, "-m", "bot.sim.stray", "--gpus", "0,1", "--gib", "3", env=env)
    probe = SimProbe(load_profile("small-2gpu"), tmp_path)
    wait_until(lambda: all(g.processes for g in probe.gpus().gpus))
    for gpu in probe.gpus().gpus:
        assert [(p.pid, p.used_bytes) for p in gpu.processes] == [(stray.pid, 3 * GIB)]
    wait_until(lambda: any(s.pid == stray.pid for s in probe.stray_server_processes([])))
    other_host = SimProbe(load_profile("small-2gpu"), tmp_path / "other")
    assert other_host.stray_server_processes([]) == []


def test_make_probe_picks_the_simulator(tmp_path: Path) -> None:
    """probe = "sim" gives a SimProbe on the configured profile and state dir."""
    settings = AgentSettings(
        tokens=TokenSet.single(Secret("t")),
        probe="sim",
        sim_profile="small-2gpu",
        sim_state_dir=tmp_path,
        env=MappingProxyType({}),
    )
    probe = make_probe(settings)
    assert isinstance(probe, SimProbe)
    assert probe.state_dir == tmp_path
    assert probe.profile.name == "small-2gpu"


def test_a_profile_with_a_cgroup_limit_is_the_servers_memory_domain(tmp_path: Path) -> None:
    """A profile with cgroup_limit_gb puts the simulated server in that cgroup: the probe
    reports the limit, its level and a headroom under the host's, as the simulator itself
    sizes against min(host, cgroup)."""
    profile = dataclasses.replace(load_profile("small-2gpu"), cgroup_limit_gb=14.0)
    ram = SimProbe(profile, tmp_path).ram()
    assert ram.cgroup_limit_bytes == 14 * 10**9
    assert ram.cgroup_path == SIM_CGROUP
    assert ram.cgroup_used_bytes == 0  # no simulated server holds anything yet
    assert ram.headroom_bytes == 14 * 10**9  # the cgroup's 14 GB, under the host's 60 GB
