"""The message part of every SGLang log line the simulator prints, per dialect.

``old`` is the 0.5.8/0.5.9 dialect, ``new`` is 0.5.23's (docs/sglang.md, Startup log), e.g.
``KV Cache is allocated. #tokens: 231120, KV size: 15.13 GB`` (old) against
``KV Cache is allocated. dtype: torch.bfloat16, #tokens: 231120, KV size: 15.13 GB`` (new).
GB in device lines is GiB; GB in the host pool line is 1e9 bytes.
"""

from __future__ import annotations

__all__ = [
    "allocating_host",
    "allocating_host_extra",
    "capture_begin",
    "capture_end",
    "decode_batch",
    "host_extra_error",
    "host_memory_error",
    "init_begin",
    "init_end",
    "kv_allocated",
    "load_begin",
    "load_end",
    "max_total_num_tokens",
    "memory_pool_end",
    "prefill_batch",
    "rank_prefix",
    "scheduler_died",
    "unbalanced_error",
]

READY = "The server is fired up and ready to roll!"
#: A warning of the main process when ``--attention-backend torch_native`` rules graphs out.
GRAPHS_OFF_TORCH_NATIVE = "Cuda graph is disabled because of using torch native attention backend"
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
HOST_SMALLER = "The host memory should be larger than the device memory with the current protocol"
GPU_SHORT = "Not enough memory. Please try to increase --mem-fraction-static."
CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of {total:.2f} "
    "GiB of which {free:.2f} GiB is free."
)


def rank_prefix(tp: int, pp: int, dp: int, tp_size: int, pp_size: int, dp_size: int) -> str:
    """SGLang's scheduler prefix: `` DP1 PP0 TP3``, each part only when that size is > 1."""
    prefix = ""
    if dp_size > 1:
        prefix += f" DP{dp}"
    if pp_size > 1:
        prefix += f" PP{pp}"
    if tp_size > 1:
        prefix += f" TP{tp}"
    return prefix


def init_begin(new: bool) -> str:
    return "Init parallel begin." if new else "Init torch distributed begin."


def init_end(new: bool, elapsed: float, mem_usage: float) -> str:
    if new:
        return f"Init parallel ends. elapsed={elapsed:.2f} s, mem usage={mem_usage:.2f} GB"
    return f"Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage={mem_usage:.2f} GB"


def load_begin(avail: float) -> str:
    return f"Load weight begin. avail mem={avail:.2f} GB"


def load_end(new: bool, elapsed: float, arch: str, avail: float, usage: float) -> str:
    dtype = "" if new else " dtype=torch.bfloat16,"
    return (
        f"Load weight end. elapsed={elapsed:.2f} s, type={arch},{dtype} avail mem={avail:.2f} GB, "
        f"mem usage={usage:.2f} GB."
    )


def kv_allocated(new: bool, dtype: str, tokens: int, size_gib: float, mha: bool = False) -> str:
    """MLA logs one ``KV size``; MHA logs ``K size`` and ``V size``, half each."""
    middle = f"dtype: {dtype}, " if new else ""
    if mha:
        half = size_gib / 2
        sizes = f"K size: {half:.2f} GB, V size: {half:.2f} GB"
    else:
        sizes = f"KV size: {size_gib:.2f} GB"
    return f"KV Cache is allocated. {middle}#tokens: {tokens}, {sizes}"


def memory_pool_end(avail: float) -> str:
    return f"Memory pool end. avail mem={avail:.2f} GB"


def capture_begin(new: bool, batch_sizes: list[int], avail: float) -> str:
    if new:
        return (
            "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
            f"bs={batch_sizes}, avail mem={avail:.2f} GB"
        )
    return (
        f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB"
    )


def capture_end(new: bool, elapsed: float, usage: float, avail: float) -> str:
    if new:
        return (
            f"Capture target decode CUDA graph end. elapsed={elapsed:.2f} s, "
            f"mem usage={usage:.2f} GB, avail mem={avail:.2f} GB."
        )
    return (
        f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. "
        f"avail mem={avail:.2f} GB."
    )


def max_total_num_tokens(
    tokens: int,
    chunked: int,
    max_prefill: int,
    max_running: int,
    context: int,
    avail: float,
    cpu: bool = False,
) -> str:
    """The scheduler's sizes; on ``--device cpu`` the free memory is the CPU's."""
    memory = "available_cpu_mem" if cpu else "available_gpu_mem"
    return (
        f"max_total_num_tokens={tokens}, chunked_prefill_size={chunked}, "
        f"max_prefill_tokens={max_prefill}, max_running_requests={max_running}, "
        f"context_len={context}, {memory}={avail:.2f} GB"
    )


def allocating_host(new: bool, tokens: int, gb: float) -> str:
    if new:
        return f"Allocating kv hierarchical KV host pool: {tokens} tokens, {gb:.2f} GB host memory."
    return f"Allocating {gb:.2f} GB host memory for hierarchical KV cache."


def allocating_host_extra(name: str, gb: float) -> str:
    """Another host allocation beside the KV host pool (0.5.23's DSA indexer)."""
    return f"Allocating {gb:.2f} GB host memory for {name} (layout=page_first)."


def memory_headroom(host_bytes: int, cgroup_bytes: int) -> str:
    """0.5.23 in a memory cgroup (``srt/mem_cache/host_memory.py``), e.g.
    ``HiCache memory headroom: host 55.0 GiB, cgroup 15.0 GiB``."""
    return (
        f"HiCache memory headroom: host {host_bytes / 1024**3:.1f} GiB, "
        f"cgroup {cgroup_bytes / 1024**3:.1f} GiB"
    )


def auto_sizing(
    requested: float, ratio: float, budget_gib: float, fraction: float, ranks: int, pools_gib: float
) -> str:
    """0.5.23 without --hicache-ratio or --hicache-size (``srt/mem_cache/hicache_auto_size.py``),
    e.g. ``HiCache auto-sizing: ratio 2.000 -> 1.234; 20.0 GiB host memory per rank (fraction
    0.80, 2 ranks on this host), host pools 12.3 GiB.``"""
    return (
        f"HiCache auto-sizing: ratio {requested:.3f} -> {ratio:.3f}; {budget_gib:.1f} GiB host "
        f"memory per rank (fraction {fraction:.2f}, {ranks} ranks on this host), host pools "
        f"{pools_gib:.1f} GiB."
    )


#: 0.5.23's auto-sizing with no host RAM left over the reserve.
AUTO_SIZING_NOTHING_LEFT = (
    "No host memory is left for HiCache after the 10 GiB reserve; "
    "set --hicache-ratio or --hicache-size explicitly."
)
#: 0.5.23's check of --hicache-host-memory-mode buffer_only (``arg_groups/hicache_hook.py``).
BUFFER_ONLY_NEEDS_STORAGE = (
    "--hicache-host-memory-mode buffer_only requires a storage backend "
    "(--hicache-storage-backend): host memory is only a staging buffer "
    "and all cached data lives in storage."
)

BUFFER_ONLY_ON_DECODE = (
    "--hicache-host-memory-mode buffer_only is not supported on "
    "decode instances: the decode-side prefetch and offload paths "
    "bypass the buffer-mode pipeline, fetching without its prefix "
    "context and never consuming its staged holds. Prefill "
    "instances share the standard scheduler path and are supported."
)


#: Mooncake's store, configured from --hicache-storage-backend-extra-config and set up
#: (``srt/mem_cache/storage/mooncake_store/mooncake_store.py``).
MOONCAKE_SETUP = "Mooncake store setup successfully."


def mooncake_config_loaded(source: str) -> str:
    return f"Mooncake Configuration loaded from {source} successfully."


def host_memory_mode_error(mode: str) -> str:
    return f"hicache_host_memory_mode must be 'cache' or 'buffer_only', got {mode!r}"


def use_swa_pool(full_tokens: int, swa_tokens: int) -> str:
    """A hybrid SWA model's pool split (``srt/model_executor/pool_configurator.py``)."""
    return (
        f"Use sliding window memory pool. full_layer_tokens={full_tokens}, "
        f"swa_layer_tokens={swa_tokens}"
    )


def swa_pool_usage(gb: float, swa_tokens: int, full_tokens: int) -> str:
    """``SWAKVPool mem usage: 5.14 GB, swa size: 26397, full size: 32997``
    (``srt/mem_cache/swa_memory_pool.py``)."""
    return f"SWAKVPool mem usage: {gb:.2f} GB, swa size: {swa_tokens}, full size: {full_tokens}"


def host_memory_error(requested_gb: float, free_gb: float) -> str:
    return (
        f"Not enough host memory available. Requesting {requested_gb:.2f} GB but only have "
        f"{free_gb:.2f} GB free. Please reduce the size of the hierarchical cache."
    )


def host_extra_error(name: str, requested_gb: float, free_gb: float) -> str:
    return (
        f"Not enough host memory for {name} hierarchical cache. Requesting {requested_gb:.2f} GB "
        f"but only have {free_gb:.2f} GB free."
    )


def unbalanced_error(min_gib: float, local_gib: float) -> str:
    return (
        "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
        f"min_per_gpu_memory={min_gib}, local_gpu_memory={local_gib}, "
        f"local_gpu_memory * 0.9={local_gib * 0.9}"
    )


def scheduler_died(rank: int, code: int) -> str:
    return (
        f"Rank {rank} scheduler died during initialization (exit code: {code}). If exit code is "
        "-9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."
    )


def prefill_batch(
    new: bool,
    seqs: int,
    tokens: int,
    cached: int,
    usage: float,
    running: int,
    queued: int,
    throughput: float,
) -> str:
    extra = "#pending-token: 0, cuda graph: False, " if new else ""
    return (
        f"Prefill batch, #new-seq: {seqs}, #new-token: {tokens}, #cached-token: {cached}, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queued}, {extra}"
        f"input throughput (token/s): {throughput:.2f}"
    )


def decode_batch(running: int, tokens: int, usage: float, throughput: float, queued: int) -> str:
    return (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
        f"cuda graph: True, gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}"
    )
