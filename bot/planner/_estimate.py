"""An upper bound of one rank's device KV pool, for a server that has never logged it
(docs/sglang.md, First-start estimate)::

    fraction = --mem-fraction-static, else the most SGLang 0.5.x picks by itself:
               round((GPU MiB - reserve) / GPU MiB, 3), reserve = 512 + 2048 x 1.5
               + tp x pp / 8 x 1024 MiB, and at least 10 GiB on a GPU over 60 GiB
    weights  = the checkpoint's total size / (tp x pp)
    KV bytes = GPU memory x fraction - weights per rank
    tokens   = KV bytes // KV bytes per token, page aligned down
    capped by --max-total-tokens, which SGLang never exceeds

The bound holds by construction, not by a margin. SGLang sizes the pool as ``free memory after
loading (least over ranks) - memory free before loading x (1 - fraction)``
(``mem_cache/kv_cache_configurator.py``, ``_profile_available_bytes``), that is ``memory free
before loading x fraction - everything loading left resident``. Free memory before loading is at
most the GPU's total (NVML's, of the smallest GPU); on GPUs that start alike, what loading left
on the rank with the least free memory is at least the weights' mean share, the checkpoint /
(tp x pp), when the server loads every tensor of it at its stored size; the pool then divides
that by a cell at least the target's bytes per token (draft and sliding-window pools take their
share too), and aligns to a page as we do. Where the server loads less than its
checkpoint (an MTP layer without speculative decoding, a vision tower it skips, weights quantized
on load) the bound can fall short: the startup guard then checks the real start, and once the
server has started its logged pool replaces the estimate. Kimi-K2.5 on 96 GiB GPUs, TP 8, no
fraction given: 96 GiB x 0.896 - 72.33 GiB = 13.69 GiB, 209,119 tokens at 70,272 B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from bot.errors import PlanInputError
from bot.planner._units import GiB

__all__ = [
    "DeviceMemory",
    "DevicePoolEstimate",
    "DevicePoolSource",
    "default_mem_fraction_static",
    "estimate_device_pool",
]

_MiB = 1024**2
# SGLang 0.5.x's least reserve: 512 MiB of metadata, the activations of at least 2,048 tokens at
# 1.5 MiB each, a GiB per eight ranks; on a GPU over 60 GiB never under 10 GiB.
_RESERVE_BASE_MIB = 512 + 2048 * 1.5
_LARGE_GPU_MIB = 60 * 1024
_LARGE_GPU_RESERVE_MIB = 10 * 1024


class DevicePoolSource(StrEnum):
    """Where the device pool a plan multiplies came from."""

    SERVER_INFO = "server_info"  # the running server's /server_info
    STARTUP_LOG = "startup_log"  # the last start's log (file or journal)
    LAST_START = "last_start"  # the agent's record of an earlier start
    ESTIMATE = "estimate"  # the model's files and the GPUs (no start on record)


@dataclass(frozen=True)
class DeviceMemory:
    """What sizes a pool SGLang has not logged yet: one GPU's memory (the smallest of the
    server's, as SGLang takes the least across its ranks), the weights each rank holds, and the
    fraction SGLang gives weights and KV pool together."""

    gpu_memory_bytes: int
    weights_bytes_per_rank: int
    mem_fraction_static: float
    fraction_given: bool  # on the command line; else SGLang's default, at most
    max_total_tokens: int | None = None  # --max-total-tokens: SGLang's pool is never larger

    def __post_init__(self) -> None:
        if self.max_total_tokens is not None and self.max_total_tokens < 1:
            raise PlanInputError(
                f"--max-total-tokens {self.max_total_tokens!r} must be at least 1 token"
            )
        if self.gpu_memory_bytes <= 0:
            raise PlanInputError(f"GPU memory must be positive, not {self.gpu_memory_bytes!r}")
        if self.weights_bytes_per_rank < 0:
            raise PlanInputError(
                f"weights per rank must be >= 0 bytes, not {self.weights_bytes_per_rank!r}"
            )
        if not (math.isfinite(self.mem_fraction_static) and 0 < self.mem_fraction_static <= 1):
            raise PlanInputError(
                f"mem_fraction_static {self.mem_fraction_static!r} is not in (0, 1]; "
                "SGLang takes a fraction such as 0.88"
            )


@dataclass(frozen=True)
class DevicePoolEstimate:
    """The estimate and the figures it came from: ``tokens`` is the upper bound of the pool,
    the one the plan multiplies."""

    memory: DeviceMemory
    bytes_per_token: int
    kv_bytes: int
    tokens: int

    @property
    def planned_tokens(self) -> int:
        """The device pool a plan multiplies: the bound itself."""
        return self.tokens

    def describe(self) -> str:
        """The arithmetic in one sentence, for the plan's notes."""
        memory = self.memory
        fraction = "given" if memory.fraction_given else "SGLang's default at most"
        cap = memory.max_total_tokens
        capped = "" if cap is None else f", at most --max-total-tokens {cap:,}"
        return (
            f"device pool estimated from the model's files (no start on record): "
            f"{memory.gpu_memory_bytes / GiB:.2f} GiB GPU x {memory.mem_fraction_static:g} "
            f"({fraction}) - {memory.weights_bytes_per_rank / GiB:.2f} GiB weights per rank = "
            f"{self.kv_bytes / GiB:.2f} GiB, {self.tokens:,} tokens at {self.bytes_per_token:,} "
            f"B{capped}, an upper bound of the pool SGLang sizes in what the GPU holds at that "
            "fraction. The startup guard stops the start if the logged host pool "
            "exceeds the budget, and once the server has started its logged pool replaces the "
            "estimate"
        )


def default_mem_fraction_static(gpu_memory_bytes: int, tp: int = 1, pp: int = 1) -> float:
    """The largest ``--mem-fraction-static`` SGLang 0.5.x picks by itself on this GPU: 96 GiB
    at TP 8 -> 0.896 (the 10 GiB floor), 24 GiB at TP 2 -> 0.844."""
    gpu_mib = gpu_memory_bytes / _MiB
    if gpu_mib <= 0:
        raise PlanInputError(f"GPU memory must be positive, not {gpu_memory_bytes!r} bytes")
    reserve = _RESERVE_BASE_MIB + tp * pp / 8 * 1024
    if gpu_mib > _LARGE_GPU_MIB:
        reserve = max(reserve, _LARGE_GPU_RESERVE_MIB)
    return round((gpu_mib - reserve) / gpu_mib, 3)


def estimate_device_pool(
    memory: DeviceMemory, bytes_per_token: int, page_size: int = 1
) -> DevicePoolEstimate | str:
    """The estimate, or why there is none (the weights leave no room for a KV pool)."""
    if bytes_per_token < 1:
        raise PlanInputError(f"KV bytes per token must be at least 1, not {bytes_per_token!r}")
    static = math.floor(memory.gpu_memory_bytes * memory.mem_fraction_static)
    kv_bytes = static - memory.weights_bytes_per_rank
    tokens = (max(kv_bytes, 0) // bytes_per_token) // page_size * page_size
    if tokens <= 0:
        return (
            f"the weights ({memory.weights_bytes_per_rank / GiB:.2f} GiB per rank) leave no "
            f"KV pool in {memory.gpu_memory_bytes / GiB:.2f} GiB x "
            f"{memory.mem_fraction_static:g}"
        )
    cap = memory.max_total_tokens
    if cap is not None:
        tokens = min(tokens, cap)  # SGLang takes min(profiled, --max-total-tokens)
    return DevicePoolEstimate(
        memory=memory, bytes_per_token=bytes_per_token, kv_bytes=kv_bytes, tokens=tokens
    )
