"""Host memory: each era's check, the OOM of 8 x 300 GB, 8 x 48 GB coming up, shared RAM."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.sim import load_profile, read_host_state
from tests.sim.conftest import Sim

READY = "The server is fired up and ready to roll!"
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
KIMI = [
    "--model-path",
    "/models/Kimi-K2.5",
    "--tp",
    "8",
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "--trust-remote-code",
    "--enable-hierarchical-cache",
    "--hicache-write-policy",
    "write_through",
    "--hicache-io-backend",
    "kernel",
]
PER_TOKEN = 70272


@pytest.fixture
def kimi_env(sim_env: dict[str, str]) -> dict[str, str]:
    """The field notes' host, at a time scale where a full start takes about a second."""
    return dict(sim_env, KIMI_SIM_PROFILE="kimi-k25-8gpu", KIMI_SIM_TIME_SCALE="0.002")


def allocating(sim: Sim) -> list[tuple[str, str]]:
    return [(p, m) for p, m in sim.messages() if m.startswith("Allocating")]


@pytest.mark.slow
def test_ratio_four_allocates_44_77_gb_per_rank(
    run_sim: Callable[..., Sim], kimi_env: dict[str, str]
) -> None:
    """Ratio 4 at the default fraction 0.88: KV size 10.42 GB (GiB), 44.77 GB (1e9) per rank."""
    sim = run_sim([*KIMI, "--hicache-ratio", "4"], kimi_env)
    sim.wait_for(READY)
    kv = [m for _, m in sim.messages() if m.startswith("KV Cache is allocated")]
    assert kv == ["KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB"] * 8
    lines = allocating(sim)
    assert sorted(p for p, _ in lines) == [f"TP{i}" for i in range(8)]
    assert {m for _, m in lines} == {"Allocating 44.77 GB host memory for hierarchical KV cache."}


@pytest.mark.slow
def test_size_48_in_the_new_dialect(run_sim: Callable[..., Sim], kimi_env: dict[str, str]) -> None:
    """Size 48 at fraction 0.93 (0.5.23): 231,120 device tokens, 15.13 GB, 683,061 host tokens."""
    env = dict(kimi_env, KIMI_SIM_VERSION="0.5.23")
    sim = run_sim([*KIMI, "--hicache-size", "48", "--mem-fraction-static", "0.93"], env)
    sim.wait_for(READY)
    text = sim.stdout()
    assert (
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 231120, KV size: 15.13 GB" in text
    )
    assert "max_total_num_tokens=231120," in text
    expected = "Allocating kv hierarchical KV host pool: 683061 tokens, 48.00 GB host memory."
    assert [m for _, m in allocating(sim)] == [expected] * 8


@pytest.mark.slow
def test_0_5_9_8x300_passes_each_rank_check_then_is_oom_killed(
    run_sim: Callable[..., Sim], kimi_env: dict[str, str]
) -> None:
    """0.5.9 checks each rank alone: all eight allocate 300 GB, then the OOM kill takes the tree."""
    sim = run_sim([*KIMI, "--hicache-size", "300", "--mem-fraction-static", "0.93"], kimi_env)
    assert sim.wait() == -9
    assert [m for _, m in allocating(sim)] == [
        "Allocating 300.00 GB host memory for hierarchical KV cache."
    ] * 8
    assert READY not in sim.stdout()
    assert "Uvicorn running" not in sim.stdout()


@pytest.mark.slow
def test_0_5_23_8x300_is_refused_by_the_per_host_budget(
    run_sim: Callable[..., Sim], kimi_env: dict[str, str]
) -> None:
    """0.5.23 splits (available - 10 GiB) over 8 ranks: ValueError, sigquit, tree killed."""
    env = dict(kimi_env, KIMI_SIM_VERSION="0.5.23")
    sim = run_sim([*KIMI, "--hicache-size", "300"], env)
    assert sim.wait() == -9
    text = sim.stdout()
    # available = 445 GB - the server's own 2 + 8 x 4 GB; budget = (available - 10 GiB) // 8
    budget = (445e9 - 34e9 - 10 * 1024**3) // 8 / 1e9
    error = (
        f"ValueError: Not enough host memory available. Requesting 300.00 GB but only have "
        f"{budget:.2f} GB free. Please reduce the size of the hierarchical cache."
    )
    assert re.search(
        r"\[\S+ \S+ TP\d\] Scheduler hit an exception: Traceback \(most recent call "
        r"last\):\n",
        text,
    )
    assert error in text
    assert text.rstrip().endswith(SIGQUIT)
    assert not allocating(sim)


@pytest.mark.slow
def test_second_server_sees_the_first_ones_ram(
    run_sim: Callable[..., Sim], kimi_env: dict[str, str], tmp_path: Path
) -> None:
    """A second 8 x 48 GB start while the first runs is refused by 0.5.9's check on what is left."""
    first = run_sim([*KIMI, "--hicache-size", "48"], kimi_env)
    first.wait_for(READY)
    profile = load_profile("kimi-k25-8gpu")
    snapshot = read_host_state(profile, Path(kimi_env["KIMI_SIM_STATE_DIR"]))
    held = 2e9 + 8 * 4e9 + 8 * 683061 * PER_TOKEN
    assert snapshot.ram_available_bytes == int(445e9 - held)
    assert [s.pid for s in snapshot.servers] == [first.pid]
    assert snapshot.servers[0].host_bytes == int(held)

    second = run_sim([*KIMI, "--hicache-size", "48"], kimi_env)
    assert second.wait() == -9
    free = (445e9 - held - 34e9 - 10 * 1024**3) / 1e9
    assert (
        f"Not enough host memory available. Requesting 48.00 GB but only have {free:.2f} GB free."
    ) in second.stdout()
    assert first.terminate() == 0
