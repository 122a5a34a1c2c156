"""The simulator on SGLang 0.5.23's CPU path, held to the lines a real 0.5.23 printed on CPU.

Expected lines are quoted from that real start (``make test-real``: the tiny random Llama, MHA,
256 KV bytes per token, ``--max-total-tokens 16384``), never from the simulator's own texts.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.sim.conftest import Sim

# The host profile of the real CPU start: one device, the tiny model's figures as logged.
CPU_PROFILE = Path(__file__).resolve().parents[1] / "real_sglang" / "tiny-llama-cpu.json"
READY = "The server is fired up and ready to roll!"
# The flags the real CPU start is given (SGLang's CPU path, no overlap scheduler).
CPU_FLAGS = [
    "--model-path", "/models/tiny-llama", "--device", "cpu",
    "--host", "127.0.0.1", "--port", "0",
    "--disable-overlap-schedule", "--attention-backend", "torch_native",
    "--max-total-tokens", "16384", "--max-running-requests", "16",
]  # fmt: skip
# Real 0.5.23 lines on CPU, as logged:
GRAPHS_OFF = "Cuda graph is disabled because of using torch native attention backend"
FIRST_BAR = "Multi-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]"
# 16,384 tokens x 256 B is 4 MiB: K and V are 0.00 GiB each.
MHA_POOL = (
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 16384, K size: 0.00 GB, V size: 0.00 GB"
)
MAX_TOTAL_CPU = re.compile(
    r"max_total_num_tokens=16384, chunked_prefill_size=4096, max_prefill_tokens=16384, "
    r"max_running_requests=16, context_len=2048, available_cpu_mem=\d+\.\d\d GB"
)
# The graph lines of both eras: "Capture cuda graph begin.", "Capture target decode CUDA graph
# begin.", their "end." lines, and the "Capturing batches" bar.
GRAPH_TEXTS = ("Capture cuda graph", "CUDA graph begin", "CUDA graph end", "Capturing batches")


def _cpu_env(sim_env: dict[str, str]) -> dict[str, str]:
    return dict(sim_env, KIMI_SIM_VERSION="0.5.23", KIMI_SIM_PROFILE=str(CPU_PROFILE))


@pytest.mark.slow
def test_a_cpu_start_prints_the_real_cpu_lines_in_the_real_order(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """With the real CPU start's flags the simulator becomes ready and prints the graphs-off
    warning, the arguments as a dict, the multi-thread bar, K and V sizes, no graph line, and
    ``available_cpu_mem`` right after the pool."""
    sim = run_sim(CPU_FLAGS, _cpu_env(sim_env))
    sim.wait_for(READY)
    messages = [message for _, message in sim.messages()]
    assert messages[0] == GRAPHS_OFF
    dump = messages[1].removeprefix("server_args=")
    assert dump != messages[1]
    arguments = ast.literal_eval(dump)
    assert (arguments["model_path"], arguments["device"]) == ("/models/tiny-llama", "cpu")
    assert arguments["disable_overlap_schedule"] is True
    assert f"\r{FIRST_BAR}" in sim.stderr()
    pool = messages.index(MHA_POOL)
    total = next(i for i, m in enumerate(messages) if MAX_TOTAL_CPU.fullmatch(m))
    assert [m.split(".")[0] for m in messages[pool + 1 : total]] == ["Memory pool end"]
    everything = sim.stdout() + sim.stderr()
    assert not [text for text in GRAPH_TEXTS if text in everything]
    sim.terminate()


@pytest.mark.slow
def test_disable_cuda_graph_on_a_gpu_captures_nothing_and_keeps_the_gpu_wording(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """``--disable-cuda-graph`` alone drops every graph line without the torch_native warning;
    the memory stays ``available_gpu_mem`` (no ``--device cpu``)."""
    args = ["--model-path", "/models/kimi", "--host", "127.0.0.1", "--port", "0"]
    sim = run_sim([*args, "--disable-cuda-graph"], dict(sim_env, KIMI_SIM_VERSION="0.5.23"))
    sim.wait_for(READY)
    everything = sim.stdout() + sim.stderr()
    assert not [text for text in GRAPH_TEXTS if text in everything]
    assert GRAPHS_OFF not in everything
    assert re.search(r", available_gpu_mem=\d+\.\d\d GB\n", sim.stdout())
    sim.terminate()
