"""SGLang's sizing rules as the simulated server applies them (docs/sglang.md, Host pool sizing)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AUTO_SLACK",
    "BACKUP_ONLY_RATIO",
    "GIB",
    "RESERVE_BYTES",
    "AutoSize",
    "HostPool",
    "auto_size",
    "decode_backup_ratio",
    "headroom",
    "host_pool",
    "kv_gib",
    "mooncake_segment_bytes",
]

GIB = 1024**3
#: SGLang keeps 10 GiB of host RAM out of the HiCache budget.
RESERVE_BYTES = 10 * GIB
#: 0.5.23's auto-sizing leaves this share of the budget for page rounding and staging buffers.
AUTO_SLACK = 0.05
#: A decode server's backup-only retraction pool, as a fraction of the device pool.
BACKUP_ONLY_RATIO = 0.2


@dataclass(frozen=True)
class HostPool:
    """One rank's HiCache host pool: ``Allocating {gb:.2f} GB host memory ...``."""

    tokens: int
    bytes: int

    @property
    def gb(self) -> float:
        return self.bytes / 1e9


def host_pool(
    device_tokens: int,
    size_per_token: int,
    ratio: float,
    size_gb: int,
    page_size: int,
    factor: float = 1.0,
) -> HostPool:
    """Per-rank host pool: size (GB, 1e9) wins over ratio; then one extra page, always.
    ``factor`` (``KIMI_SIM_FAIL=host_pool_x``) scales the pages, as a version sizing the pool by
    another rule would.

    >>> host_pool(159274, 70272, 4.0, 0, 1).bytes / 1e9
    44.770080384
    >>> host_pool(159274, 70272, 2.0, 48, 1).tokens
    683061
    """
    if size_gb > 0:
        tokens = int(size_gb * 1e9 // size_per_token)
    else:
        tokens = int(device_tokens * ratio)
    pages = int((tokens // page_size + 1) * factor)
    tokens = pages * page_size
    return HostPool(tokens=tokens, bytes=tokens * size_per_token)


def kv_gib(tokens: int, size_per_token: int, page_size: int = 1) -> float:
    """Device KV pool size in GiB, as ``KV Cache is allocated. ... KV size: X GB`` prints it:
    SGLang's buffer holds ``tokens + page_size`` rows (one padding page)."""
    return (tokens + page_size) * size_per_token / GIB


def headroom(host_available: int, cgroup_limit: int | None, cgroup_used: int) -> int:
    """SGLang 0.5.23's allocatable RAM: host available, or the cgroup's room under its limit
    when that is less (``available_host_memory_bytes``, ``srt/mem_cache/host_memory.py``).

    >>> headroom(60 * GIB, 20 * GIB, 5 * GIB) / GIB
    15.0
    >>> headroom(60 * GIB, None, 5 * GIB) / GIB
    60.0
    """
    if cgroup_limit is None:
        return host_available
    return min(host_available, max(0, cgroup_limit - cgroup_used))


@dataclass(frozen=True)
class AutoSize:
    """0.5.23's auto-sizing of one start: the ratio it picks and the figures it logs."""

    requested: float
    ratio: float
    budget_bytes: int  # per rank, the fraction applied
    fraction: float
    ranks: int
    device_bytes: int

    @property
    def pools_gib(self) -> float:
        return self.device_bytes * self.ratio / GIB


def auto_size(
    requested: float, fraction: float, available: int, ranks: int, device_bytes: int
) -> AutoSize:
    """``auto_size_hicache`` (``srt/mem_cache/hicache_auto_size.py``): the ratio lowered until
    the pools fit ``fraction`` of ((available - 10 GiB) // ranks), less 5% slack.

    >>> a = auto_size(2.0, 0.8, 60 * GIB, 2, 10 * GIB)
    >>> round(a.ratio, 6), a.budget_bytes / GIB
    (1.9, 20.0)
    """
    budget = int(((available - RESERVE_BYTES) // ranks) * fraction)
    ratio = min(requested, budget * (1 - AUTO_SLACK) / device_bytes)
    return AutoSize(requested, ratio, budget, fraction, ranks, device_bytes)


def decode_backup_ratio(device_tokens: int, context_len: int, page_size: int) -> float:
    """A decode server's backup-only retraction pool ratio (``kv_cache_builder.py``): 0.2, or
    enough for one request of the longest context when that is more.

    >>> decode_backup_ratio(200000, 32768, 1)
    0.2
    >>> decode_backup_ratio(100000, 32768, 1)
    0.32767
    """
    longest = min(context_len - 1, device_tokens)
    longest = -(-longest // page_size) * page_size
    return max(BACKUP_ONLY_RATIO, longest / device_tokens)


def mooncake_segment_bytes(value: object) -> int:
    """Mooncake's ``global_segment_size``: bytes, or ``"<N>gb"`` in GiB (``_parse_global_segment
    _size``, ``srt/mem_cache/storage/mooncake_store/mooncake_store.py``).

    >>> mooncake_segment_bytes("4gb") == 4 * GIB, mooncake_segment_bytes(1000)
    (True, 1000)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text.endswith("gb"):
        return int(text[:-2].strip()) * GIB
    return int(text)
