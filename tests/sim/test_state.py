"""Shared host state: leftover GPU memory after SIGKILL, stray schedulers, and the RSS bound."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from bot.sim import load_profile, read_host_state
from tests.sim.conftest import Sim

READY = "The server is fired up and ready to roll!"
UNBALANCED = "The memory capacity is unbalanced. Some GPUs may be occupied by other processes."
ARGS = ["--model-path", "/models/kimi", "--tp", "2", "--host", "127.0.0.1", "--port", "0"]


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.05)


@pytest.fixture
def slow_release(sim_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """small-2gpu with a 300 s release delay: 3 s at the tests' time scale, room to restart."""
    raw = json.loads(Path("bot/sim/profiles/small-2gpu.json").read_text())
    raw["leftover_release_s"] = 300.0
    path = tmp_path / "slow-release.json"
    path.write_text(json.dumps(raw))
    return dict(sim_env, KIMI_SIM_PROFILE=str(path))


@pytest.mark.slow
def test_leftover_gpu_memory_after_sigkill_blocks_an_immediate_restart(
    run_sim: Callable[..., Sim], slow_release: dict[str, str]
) -> None:
    """After SIGKILL the old pid still holds GPU 0; a restart then fails, a later one succeeds."""
    profile = load_profile(slow_release["KIMI_SIM_PROFILE"])
    state_dir = Path(slow_release["KIMI_SIM_STATE_DIR"])
    first = run_sim(ARGS, slow_release)
    first.wait_for(READY)
    first.kill()

    snapshot = read_host_state(profile, state_dir)
    assert snapshot.servers == ()
    assert snapshot.ram_available_bytes == profile.ram_available_bytes
    assert [p.pid for p in snapshot.gpus[0].processes] == [first.pid]
    assert snapshot.gpus[0].processes[0].name == "sglang::scheduler_TP0"
    assert snapshot.gpus[0].memory_used_bytes > 0
    assert snapshot.gpus[1].processes == ()

    second = run_sim(ARGS, slow_release)
    assert second.wait() == -9
    assert UNBALANCED in second.stdout()
    assert "Scheduler hit an exception" in second.stdout()

    wait_until(lambda: not read_host_state(profile, state_dir).gpus[0].processes)
    third = run_sim(ARGS, slow_release)
    third.wait_for(READY)
    assert third.terminate() == 0


@pytest.mark.slow
def test_stray_scheduler_holds_gpu_memory_until_killed(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """A stray on GPU 0 shows in the state as sglang::scheduler_TP0 and unbalances a TP 2 start."""
    profile = load_profile("small-2gpu")
    state_dir = Path(sim_env["KIMI_SIM_STATE_DIR"])
    stray = run_sim(["--gpus", "0", "--gib", "8"], sim_env, module="bot.sim.stray")
    stray.wait_for("holds 8 GiB on GPUs [0]")
    assert psutil.Process(stray.pid).name().startswith("sglang::sched")
    gpu0 = read_host_state(profile, state_dir).gpus[0]
    assert gpu0.processes[0].pid == stray.pid
    assert gpu0.processes[0].name == "sglang::scheduler_TP0"
    assert gpu0.memory_used_bytes == 8 * 1024**3

    blocked = run_sim(ARGS, sim_env)
    assert blocked.wait() == -9
    assert UNBALANCED in blocked.stdout()

    stray.kill()
    assert read_host_state(profile, state_dir).gpus[0].processes == ()
    after = run_sim(ARGS, sim_env)
    after.wait_for(READY)


def test_stray_refuses_a_gpu_the_profile_lacks(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """A GPU index past the profile's GPUs is refused (exit 2), nothing registered."""
    stray = run_sim(["--gpus", "5"], sim_env, module="bot.sim.stray")
    assert stray.wait() == 2
    assert "GPUs [5] do not exist on small-2gpu" in stray.stderr()


def test_read_host_state_of_an_idle_host(tmp_path: Path) -> None:
    """With no simulator running, the host shows the profile's RAM and idle GPUs."""
    profile = load_profile("kimi-k25-8gpu")
    snapshot = read_host_state(profile, tmp_path / "none")
    assert snapshot.ram_total_bytes == 449 * 10**9
    assert snapshot.ram_available_bytes == 445 * 10**9
    assert len(snapshot.gpus) == 8
    assert all(g.memory_used_bytes == 0 and g.processes == () for g in snapshot.gpus)
    assert snapshot.gpus[3].memory_total_bytes == 96 * 1024**3


@pytest.mark.slow
def test_rss_stays_under_100_mb(run_sim: Callable[..., Sim], sim_env: dict[str, str]) -> None:
    """A ready 8-GPU simulator reporting 358 GB of host pools holds under 100 MB itself."""
    env = dict(sim_env, KIMI_SIM_PROFILE="kimi-k25-8gpu", KIMI_SIM_TIME_SCALE="0.002")
    sim = run_sim(
        [
            *ARGS[:3],
            "8",
            *ARGS[4:],
            "--enable-hierarchical-cache",
            "--hicache-ratio",
            "4",
            "--enable-metrics",
        ],
        env,
    )
    sim.wait_for(READY)
    assert psutil.Process(sim.pid).memory_info().rss < 100 * 1024**2
