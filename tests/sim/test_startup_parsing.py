"""The startup parser (bot.startup) reads the simulator's real output back into every figure."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.startup import Dialect, FailureKind, Phase, read_startup_report
from tests.sim.conftest import Sim

READY = "The server is fired up and ready to roll!"
ARGS = [
    "--model-path",
    "/models/kimi",
    "--tp",
    "2",
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "--enable-hierarchical-cache",
    "--hicache-ratio",
    "2",
]
# small-2gpu at its default fraction: 200,000 device tokens of 35,136 B; ratio 2 => 400,001.
KV_GIB = round(200000 * 35136 / 1024**3, 2)
HOST_TOKENS = 2 * 200000 + 1
HOST_GB = round(HOST_TOKENS * 35136 / 1e9, 2)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("version", "dialect"), [("0.5.9", Dialect.V0_5_9), ("0.5.23", Dialect.V0_5_23)]
)
def test_parser_reconstructs_a_full_start(
    run_sim: Callable[..., Sim], sim_env: dict[str, str], version: str, dialect: Dialect
) -> None:
    """Every phase, rank, progress bar and pool figure of a simulated start is parsed back."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_VERSION=version), merged=True)
    sim.wait_for(READY)
    report = read_startup_report(sim.out_path)
    assert report.dialect == dialect
    assert [span.phase for span in report.phases] == list(Phase)
    assert all(span.start is not None for span in report.phases)
    assert report.ranks == ("TP0", "TP1")
    assert report.shards == (4, 4)
    assert report.cuda_graphs == (8, 8)
    assert report.device_tokens == 200000
    assert report.kv_gib_per_rank == {"TP0": KV_GIB, "TP1": KV_GIB}
    assert report.host_gb_per_rank == {"TP0": HOST_GB, "TP1": HOST_GB}
    if version == "0.5.23":
        assert report.host_tokens_per_rank == {"TP0": HOST_TOKENS, "TP1": HOST_TOKENS}
    assert report.ready
    assert report.failure is None
    assert report.startup_seconds is not None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("version", "fail", "kind", "decisive"),
    [
        ("0.5.9", "crash_loading", FailureKind.CRASH, "SafetensorError"),
        ("0.5.23", "gpu_oom_graph", FailureKind.GPU_MEMORY, "Capture cuda graph failed"),
    ],
)
def test_parser_classifies_injected_failures(
    run_sim: Callable[..., Sim],
    sim_env: dict[str, str],
    version: str,
    fail: str,
    kind: FailureKind,
    decisive: str,
) -> None:
    """Injected crashes come back as failures of the right kind, with the decisive lines."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_VERSION=version, KIMI_SIM_FAIL=fail), merged=True)
    assert sim.wait() == -9
    report = read_startup_report(sim.out_path)
    assert not report.ready
    assert report.failure is not None
    assert report.failure.kind == kind
    assert any(decisive in line for line in report.failure.lines)
    assert any("Received sigquit" in line for line in report.failure.lines)


@pytest.mark.slow
def test_parser_classifies_the_host_memory_refusal(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """0.5.23's per-host budget refusal is a host-memory failure."""
    env = dict(
        sim_env,
        KIMI_SIM_PROFILE="kimi-k25-8gpu",
        KIMI_SIM_TIME_SCALE="0.002",
        KIMI_SIM_VERSION="0.5.23",
    )
    sim = run_sim(
        [*ARGS[:3], "8", *ARGS[4:8], "--enable-hicache", "--hicache-size", "300"], env, merged=True
    )
    assert sim.wait() == -9
    report = read_startup_report(sim.out_path)
    assert report.failure is not None
    assert report.failure.kind == FailureKind.HOST_MEMORY
    assert any("Not enough host memory available" in line for line in report.failure.lines)


@pytest.mark.slow
def test_parser_sees_the_0_5_9_oom_allocation(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """0.5.9's silent OOM: the log holds 8 x 300 GB of Allocating lines and no ready."""
    env = dict(sim_env, KIMI_SIM_PROFILE="kimi-k25-8gpu", KIMI_SIM_TIME_SCALE="0.002")
    sim = run_sim(
        [*ARGS[:3], "8", *ARGS[4:8], "--enable-hierarchical-cache", "--hicache-size", "300"],
        env,
        merged=True,
    )
    assert sim.wait() == -9
    report = read_startup_report(sim.out_path)
    assert not report.ready
    assert report.host_gb_total == 2400.0
    assert len(report.host_gb_per_rank) == 8


@pytest.mark.slow
def test_parser_classifies_the_unbalanced_gpus(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """A start beside a stray scheduler fails as gpu_busy with SGLang's unbalance message."""
    stray = run_sim(["--gpus", "1", "--gib", "8"], sim_env, module="bot.sim.stray")
    stray.wait_for("holds 8 GiB")
    sim = run_sim(ARGS, sim_env, merged=True)
    assert sim.wait() == -9
    report = read_startup_report(sim.out_path)
    assert report.failure is not None
    assert report.failure.kind == FailureKind.GPU_BUSY
    assert any("The memory capacity is unbalanced" in line for line in report.failure.lines)
