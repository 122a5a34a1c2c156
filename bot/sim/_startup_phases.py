"""Startup, phase by phase: init, weights, KV pools, graphs, then the host pool and HTTP.

Each phase prints the lines SGLang prints, records the GPU memory it takes in the shared host
state, and stops where ``KIMI_SIM_FAIL`` says (a crash, an OOM or a stall).
"""

from __future__ import annotations

import time

from bot.sim import _lines, _tqdm
from bot.sim._args import server_args_repr
from bot.sim._host_memory import host_pool_phase
from bot.sim._serving import open_http, warm_up
from bot.sim._simulation import Simulation, capture_sizes
from bot.sim._sizing import GIB, kv_gib
from bot.sim._state import read_host_state

__all__ = ["start_up"]


def start_up(sim: Simulation) -> None:
    p, new, args = sim.p, sim.s.new_dialect, sim.args
    overrides = {"mem_fraction_static": sim.fraction, "chunked_prefill_size": sim.chunked}
    if sim.torch_native:
        sim.log.line(_lines.GRAPHS_OFF_TORCH_NATIVE)
    sim.log.line("server_args=" + server_args_repr(args, overrides, new))
    sim.sleep(p.phase("init"))
    sim.check_stall("init")

    sim.each_rank(lambda r: _lines.init_begin(new))
    _check_gpus(sim)
    started = time.monotonic()
    sim.sleep(p.phase("init_parallel"))
    sim.set_gpu(p.init_mem_usage_gib)
    elapsed = time.monotonic() - started
    sim.each_rank(lambda r: _lines.init_end(new, sim.jitter(elapsed), p.init_mem_usage_gib))
    sim.check_stall("init_parallel")

    avail = sim.free_gib - p.init_mem_usage_gib
    sim.each_rank(lambda r: _lines.load_begin(avail))
    _load_weights(sim)
    sim.set_gpu(sim.gpu_gib + p.weights_gib)
    elapsed = time.monotonic() - started
    avail -= p.weights_gib
    sim.each_rank(
        lambda r: _lines.load_end(new, sim.jitter(elapsed), p.architecture, avail, p.weights_gib)
    )
    sim.check_stall("load_weights")

    sim.rank0(f"Using KV cache dtype: {p.kv_cache_dtype}")
    sim.sleep(p.phase("kv_pool"))
    mha = p.attention.upper() == "MHA"
    hybrid_gib = 0.0
    swa = p.swa_pool and new
    if swa:
        swa_tokens = sim.hybrid[0][0]
        sim.each_rank(lambda r: _lines.use_swa_pool(sim.device_tokens, swa_tokens))
    for tokens, per_token in sim.hybrid:
        size = kv_gib(tokens, per_token, args.page_size)
        hybrid_gib += size
        line = _lines.kv_allocated(new, p.kv_cache_dtype, tokens, size, mha)
        sim.each_line(line)
    sim.each_rank(
        lambda r: _lines.kv_allocated(new, p.kv_cache_dtype, sim.device_tokens, sim.kv_gib, mha)
    )
    if swa:
        usage = sim.kv_gib + hybrid_gib
        sim.each_rank(lambda r: _lines.swa_pool_usage(usage, swa_tokens, sim.device_tokens))
    avail -= sim.kv_gib + hybrid_gib + p.other_pools_gib
    sim.set_gpu(sim.gpu_gib + sim.kv_gib + hybrid_gib + p.other_pools_gib)
    sim.each_rank(lambda r: _lines.memory_pool_end(avail))
    sim.check_stall("kv_pool")

    if sim.graphs:
        avail = _graphs(sim, avail)
    if sim.draft_gib:
        # SGLang's EAGLE worker builds the draft model's runner after the target's graphs.
        sim.sleep(p.phase("kv_pool"))
        sim.each_rank(
            lambda r: _lines.kv_allocated(
                new, p.kv_cache_dtype, sim.device_tokens, sim.draft_gib, mha
            )
        )
        avail -= sim.draft_gib
        sim.set_gpu(sim.gpu_gib + sim.draft_gib)
        sim.each_rank(lambda r: _lines.memory_pool_end(avail))
    sim.rank0(
        _lines.max_total_num_tokens(
            sim.device_tokens,
            sim.chunked,
            args.max_prefill_tokens,
            sim.max_running,
            sim.context_len,
            avail,
            sim.cpu,
        )
    )
    sim.check_stall("cuda_graph")

    if sim.pool is not None:
        host_pool_phase(sim, sim.pool)
    sim.check_stall("host_pool")
    open_http(sim)
    sim.check_stall("http")
    warm_up(sim)
    sim.check_stall("warmup")


def _graphs(sim: Simulation, avail: float) -> float:
    """Capture the decode graphs on every rank; the memory left after them."""
    p, new = sim.p, sim.s.new_dialect
    sizes = capture_sizes(p.cuda_graph_batch_sizes)
    sim.each_rank(lambda r: _lines.capture_begin(new, sizes, avail))
    started = time.monotonic()
    _capture(sim, sizes, avail)
    elapsed = time.monotonic() - started
    avail -= p.cuda_graph_gib
    sim.set_gpu(sim.gpu_gib + p.cuda_graph_gib)
    sim.each_rank(lambda r: _lines.capture_end(new, sim.jitter(elapsed), p.cuda_graph_gib, avail))
    return avail


def _check_gpus(sim: Simulation) -> None:
    """Ranks past the last GPU fail; foreign memory on some GPUs is SGLang's unbalance."""
    for rank in sim.ranks:
        if rank.gpu >= sim.p.gpu_count:
            sim.die(rank, "init", "RuntimeError: CUDA error: invalid device ordinal")
    snapshot = read_host_state(sim.p, sim.s.state_dir)
    free: dict[int, float] = {}
    for gpu in snapshot.gpus:
        foreign = sum(pr.used_bytes for pr in gpu.processes if pr.pid != sim.pid)
        free[gpu.index] = max(0.0, sim.free_gib - foreign / GIB)
    if len(sim.ranks) < 2:
        return
    lowest = min(free[r.gpu] for r in sim.ranks)
    for rank in sim.ranks:
        local = free[rank.gpu]
        if lowest < local * 0.9:
            message = _lines.unbalanced_error(lowest, local)
            sim.die(rank, "init", f"ValueError: {message}")


def _load_weights(sim: Simulation) -> None:
    shards = sim.p.model_shards
    per_shard = sim.p.phase("load_weights") / shards
    started = time.monotonic()
    new = sim.s.new_dialect
    end = "" if new else "\n"
    sim.log.bar(_tqdm.shards_line(0, shards, 0.0, new), end)
    for n in range(1, shards + 1):
        sim.sleep(per_shard)
        if sim.s.failures.crash_loading and n == max(1, shards // 2):
            sim.log.err("\n")
            error = (
                "safetensors_rust.SafetensorError: Error while deserializing header: "
                "MetadataIncompleteBuffer"
            )
            sim.die(sim.ranks[0], "load", error)
        sim.log.bar(_tqdm.shards_line(n, shards, time.monotonic() - started, new), end)
    if new:
        sim.log.err("\n")


def _capture(sim: Simulation, sizes: list[int], avail: float) -> None:
    total = len(sizes)
    step = sim.p.phase("cuda_graph") / total
    started = time.monotonic()
    for i, bs in enumerate(reversed(sizes)):
        mem = avail - sim.p.cuda_graph_gib * i / total
        desc = f"Capturing batches (bs={bs} avail_mem={mem:.2f} GB)"
        sim.log.bar(_tqdm.bar_line(desc, i, total, time.monotonic() - started))
        sim.sleep(step)
        if sim.s.failures.gpu_oom_graph and i == total // 3:
            sim.log.err("\n")
            oom = _lines.CUDA_OOM.format(total=sim.p.gpu_memory_gib, free=0.12)
            cause = (
                'Traceback (most recent call last):\n  File "/usr/local/lib/python3.12/'
                'dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 370, '
                f"in __init__\n    sim.capture()\ntorch.OutOfMemoryError: {oom}\n"
            )
            line = (
                f"Exception: Capture cuda graph failed: {oom}\nPossible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
                "3. disable torch compile by not using --enable-torch-compile\n"
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge "
                "performance loss)\nOpen an issue on GitHub "
                "https://github.com/sgl-project/sglang/issues/new/choose \n"
            )
            sim.die(sim.ranks[0], "graph", line, cause)
    sim.log.bar(_tqdm.bar_line(desc, total, total, time.monotonic() - started), "\n")
