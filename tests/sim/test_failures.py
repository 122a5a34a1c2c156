"""Injected failures (KIMI_SIM_FAIL), signals, and what SGLang's own parser refuses."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.sim import load_profile, read_host_state
from tests.sim.conftest import Sim

READY = "The server is fired up and ready to roll!"
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
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


def status(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        reply.read()
        return reply.status
    finally:
        conn.close()


def state_records(env: dict[str, str]) -> dict[str, object]:
    path = Path(env["KIMI_SIM_STATE_DIR"]) / "host-state.json"
    records: dict[str, object] = json.loads(path.read_text())["records"]
    return records


@pytest.mark.slow
def test_crash_loading(run_sim: Callable[..., Sim], sim_env: dict[str, str]) -> None:
    """A crash during weight loading prints the rank's traceback and the sigquit line; 137."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_FAIL="crash_loading"))
    assert sim.wait() == -9
    text = sim.stdout()
    assert "] Scheduler hit an exception: Traceback (most recent call last):" in text
    assert "safetensors_rust.SafetensorError: Error while deserializing header" in text
    assert text.rstrip().endswith(SIGQUIT)
    assert "Load weight end." not in text
    assert state_records(sim_env) == {}


@pytest.mark.slow
def test_gpu_oom_during_graph_capture(run_sim: Callable[..., Sim], sim_env: dict[str, str]) -> None:
    """A graph-capture OOM prints `Capture cuda graph failed: ... CUDA out of memory`; 137."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_FAIL="gpu_oom_graph"))
    assert sim.wait() == -9
    text = sim.stdout()
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in text
    assert "torch.OutOfMemoryError: CUDA out of memory." in text
    assert text.rstrip().endswith(SIGQUIT)
    assert "Capture cuda graph end." not in text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("phase", "last", "absent"),
    [
        ("load_weights", "Load weight end.", "Using KV cache dtype"),
        ("cuda_graph", "max_total_num_tokens=", "Allocating"),
        ("warmup", READY, "SIGTERM"),
    ],
)
def test_stall_keeps_the_process_alive_and_silent(
    run_sim: Callable[..., Sim], sim_env: dict[str, str], phase: str, last: str, absent: str
) -> None:
    """stall:<phase> prints everything up to that phase's end, then nothing, while alive."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_FAIL=f"stall:{phase}"))
    sim.wait_for(last)
    assert sim.proc.poll() is None
    assert absent not in sim.stdout()
    assert sim.terminate() in (0, -15)


@pytest.mark.slow
def test_slow_pin_holds_the_start_after_allocating(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """slow_pin:1000 stretches the silent pin: Allocating printed, uvicorn not yet, still alive."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_FAIL="slow_pin:1000"))
    sim.wait_for("Allocating 14.05 GB host memory")
    assert sim.proc.poll() is None
    assert "Uvicorn running" not in sim.stdout()
    assert sim.terminate() == -15


@pytest.mark.slow
def test_health_flap_alternates_after_ready(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """health_flap: after ready, /health alternates 200 and 503."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_FAIL="health_flap"))
    sim.wait_for(READY)
    port = sim.port()
    assert [status(port, "/health") for _ in range(4)] == [200, 503, 200, 503]


@pytest.mark.slow
def test_sigterm_drains_with_503_and_exits_0(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """SIGTERM after ready: /health 503 while draining, shutdown lines, state released, exit 0."""
    sim = run_sim(ARGS, sim_env)
    sim.wait_for(READY)
    port = sim.port()
    assert state_records(sim_env) != {}
    sim.proc.terminate()
    sim.wait_for("Draining requests and shutting down...")
    assert status(port, "/health") == 503
    assert sim.wait() == 0
    assert "INFO:     Finished server process" in sim.stdout()
    assert state_records(sim_env) == {}


@pytest.mark.slow
def test_sigterm_during_startup_releases_state(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """SIGTERM before the HTTP phase ends the process as Python does (-15), state released."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_FAIL="stall:kv_pool"))
    sim.wait_for("Memory pool end.")
    assert sim.terminate() == -15
    assert state_records(sim_env) == {}


@pytest.mark.parametrize(
    ("extra", "version", "error"),
    [
        (["--hicache-size", "44.5"], "0.5.9", "argument --hicache-size: invalid int value: '44.5'"),
        (["--frobnicate"], "0.5.9", "unrecognized arguments: --frobnicate"),
        (["--enable-hicache"], "0.5.9", "unrecognized arguments: --enable-hicache"),
        (["--hicache-write-policy", "sometimes"], "0.5.23", "invalid choice: 'sometimes'"),
        (["--hicache-io-backend", "dma"], "0.5.23", "invalid choice: 'dma'"),
    ],
)
@pytest.mark.slow
def test_bad_flags_exit_2_with_usage(
    run_sim: Callable[..., Sim],
    sim_env: dict[str, str],
    extra: list[str],
    version: str,
    error: str,
) -> None:
    """What SGLang's argparse refuses exits 2 with the usage and the reason on stderr."""
    sim = run_sim([*ARGS, *extra], dict(sim_env, KIMI_SIM_VERSION=version))
    assert sim.wait() == 2
    assert sim.stderr().startswith("usage: launch_server.py")
    assert error in sim.stderr()
    assert sim.stdout() == ""
    assert not Path(sim_env["KIMI_SIM_STATE_DIR"]).exists()


@pytest.mark.slow
def test_missing_model_path_exits_2(run_sim: Callable[..., Sim], sim_env: dict[str, str]) -> None:
    """--model-path is required, as in SGLang."""
    sim = run_sim(["--tp", "2"], sim_env)
    assert sim.wait() == 2
    assert "the following arguments are required: --model-path" in sim.stderr()


@pytest.mark.slow
def test_hicache_with_disable_radix_cache_raises(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """HiCache with --disable-radix-cache is SGLang's ValueError at startup: traceback, exit 1."""
    sim = run_sim([*ARGS, "--disable-radix-cache"], sim_env)
    assert sim.wait() == 1
    err = sim.stderr()
    assert err.startswith("Traceback (most recent call last):")
    assert err.rstrip().endswith(
        "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are "
        "mutually exclusive and cannot be used at the same time. Please use only one of them."
    )
    assert sim.stdout() == ""


@pytest.mark.slow
def test_tp_abbreviation_reaches_tp_size(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """--tp is --tp-size by argparse prefix matching (seen in the first log line)."""
    sim = run_sim(["--model-path", "/m", "--tp", "1"], dict(sim_env, KIMI_SIM_FAIL="stall:init"))
    sim.wait_for("server_args=ServerArgs(")
    assert "tp_size=1," in sim.stdout()
    sim.terminate()


@pytest.mark.slow
def test_bad_environment_exits_2(run_sim: Callable[..., Sim], sim_env: dict[str, str]) -> None:
    """A bad KIMI_SIM_* value is named on stderr and nothing starts."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_TIME_SCALE="warp"))
    assert sim.wait() == 2
    assert "bot.sim: KIMI_SIM_TIME_SCALE 'warp' is not a number" in sim.stderr()


@pytest.mark.slow
def test_0_5_9_refuses_a_host_pool_smaller_than_the_device_pool(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """SGLang <= 0.5.12 asserts the host pool is larger than the device pool (ratio 0.5 fails)."""
    args = [a if a != "2" or i != len(ARGS) - 1 else "0.5" for i, a in enumerate(ARGS)]
    sim = run_sim(args, sim_env)
    assert sim.wait() == -9
    assert (
        "AssertionError: The host memory should be larger than the device memory with the "
        "current protocol"
    ) in sim.stdout()


@pytest.mark.slow
def test_host_pool_x_allocates_factor_times_the_rule_and_pins_step_by_step(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """host_pool_x:2 logs twice SGLang's pool (ratio 2 x 200,000 device tokens + one page,
    doubled: 800,002 tokens x 35,136 B = 28.11 GB per rank) and the shared state's RAM falls
    while the pin proceeds, not all at once."""
    rule_tokens = 200_000 * 2 + 1
    gb = 2 * rule_tokens * 35_136 / 1e9
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_FAIL="host_pool_x:2,slow_pin:20"))
    sim.wait_for(f"Allocating {gb:.2f} GB host memory for hierarchical KV cache.")
    profile = load_profile("small-2gpu")
    base = int((1.0 + 2 * 2.0) * 1e9)  # the profile's server RAM: main + 2 ranks
    held: set[int] = set()
    deadline = time.monotonic() + 30
    while len(held) < 3 and time.monotonic() < deadline and sim.proc.poll() is None:
        for server in read_host_state(profile, Path(sim_env["KIMI_SIM_STATE_DIR"])).servers:
            held.add(server.host_bytes)
        time.sleep(0.02)
    pinning = sorted(h for h in held if base < h < base + 2 * gb * 1e9)
    assert len(pinning) >= 2, held
    sim.terminate()
