"""The first-start estimate against the pool a real SGLang 0.5.23 sizes on CPU.

On a CPU device SGLang sizes the pool from the host's free memory per NUMA node
(``utils/common.py``, ``get_available_gpu_memory``) by the rule it uses on GPUs
(``_profile_available_bytes``), so the bound holds with the host's total memory per node in the
GPU's place. The server here runs without ``--max-total-tokens`` (the other real tests fix their
pool with it) at ``--mem-fraction-static 0.05``: a pool of about a gigabyte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.planner import DeviceMemory, DevicePoolEstimate, estimate_device_pool
from bot.startup import DevicePool, StartupParser
from tests.real_sglang._launch import run_to_ready
from tests.real_sglang._side import SideVenv, free_port, kv_bytes_per_token
from tests.real_sglang.conftest import START_TIMEOUT_S, clean_environ, server_environ

pytestmark = pytest.mark.real_sglang

FRACTION = 0.05


def mem_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("/proc/meminfo has no MemTotal")


def numa_nodes() -> int:
    return max(1, len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))))


def test_the_estimate_is_at_least_the_pool_sglang_sizes_on_cpu(
    side: SideVenv, tmp_path: Path
) -> None:
    """SGLang on CPU at fraction 0.05 logs its pool; our estimate from the host's memory per
    NUMA node, the model's file and its config is not below it."""
    argv = [
        str(side.python), "-m", "sglang.launch_server",
        "--model-path", str(side.model), "--device", "cpu",
        "--host", "127.0.0.1", "--port", str(free_port()),
        "--disable-overlap-schedule", "--attention-backend", "torch_native",
        "--max-running-requests", "16", "--mem-fraction-static", str(FRACTION),
    ]  # fmt: skip
    run = run_to_ready(
        argv, server_environ(clean_environ()), tmp_path / "server.log", START_TIMEOUT_S
    )
    assert run.returncode is None, f"the real server exited {run.returncode}:\n{run.log[-3000:]}"
    parser = StartupParser()
    pools = [e for e in parser.feed(run.log) + parser.close() if isinstance(e, DevicePool)]
    assert pools, run.log[-3000:]
    logged = pools[0].tokens
    assert logged is not None
    assert logged > 100_000  # sized by memory, not by a cap
    weights = sum(f.stat().st_size for f in side.model.glob("*.safetensors"))
    memory = DeviceMemory(
        gpu_memory_bytes=mem_total_bytes() // numa_nodes(),
        weights_bytes_per_rank=weights,
        mem_fraction_static=FRACTION,
        fraction_given=True,
    )
    estimate = estimate_device_pool(memory, kv_bytes_per_token(side.model))
    assert isinstance(estimate, DevicePoolEstimate), estimate
    assert estimate.tokens >= logged, (estimate.tokens, logged)
