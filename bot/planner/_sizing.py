"""SGLang's host-pool sizing rule, per rank (``mem_cache/memory_pool_host.py`` in 0.5.9,
``mem_cache/pool_host/base.py`` in 0.5.23)::

    if hicache_size > 0:  tokens = int(hicache_size * 1e9 // size_per_token)
    else:                 tokens = int(device_tokens * hicache_ratio)
    pages = tokens // page_size + 1          # always one extra page
    tokens = pages * page_size
    bytes = tokens * size_per_token

``size_per_token`` need not be known from the model shape: it is the device pool's KV bytes divided
by its tokens (``KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB`` gives ~70,247 B/token
for a 70,272 B/token model: the log rounds the GiB to two decimals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bot.planner._units import GB, GiB


@dataclass(frozen=True)
class DevicePool:
    """What is known of one rank's device KV pool; any two of the three figures give the third."""

    tokens: int | None = None
    kv_bytes: float | None = None
    bytes_per_token: float | None = None

    @classmethod
    def from_log(cls, tokens: int | None, kv_gib: float | None) -> DevicePool:
        """From ``#tokens: N, KV size: X GB`` (X in GiB), as SGLang logs it."""
        return cls(tokens=tokens, kv_bytes=None if kv_gib is None else kv_gib * GiB)

    def resolved(self) -> DevicePool:
        tokens, kv_bytes, per_token = self.tokens, self.kv_bytes, self.bytes_per_token
        if per_token is None and tokens and kv_bytes is not None:
            per_token = kv_bytes / tokens
        if kv_bytes is None and tokens is not None and per_token is not None:
            kv_bytes = tokens * per_token
        if tokens is None and kv_bytes is not None and per_token:
            tokens = int(kv_bytes // per_token)
        return DevicePool(tokens=tokens, kv_bytes=kv_bytes, bytes_per_token=per_token)


@dataclass(frozen=True)
class HostPoolSize:
    """One rank's host pool: tokens (None when the bytes per token are unknown) and bytes."""

    tokens: int | None
    bytes: float

    @property
    def gb(self) -> float:
        return self.bytes / GB


def host_pool_for_size(size_gb: int, pool: DevicePool, page_size: int) -> HostPoolSize:
    """``--hicache-size N``: whole GB (1e9) per rank, plus the extra page."""
    per_token = pool.bytes_per_token
    if not per_token:
        # Without the bytes per token the page rounding is unknowable; it is under one page.
        return HostPoolSize(tokens=None, bytes=float(size_gb * GB))
    tokens = _page_aligned(int(size_gb * GB // per_token), page_size)
    return HostPoolSize(tokens=tokens, bytes=tokens * per_token)


def host_tokens_for_ratio(device_tokens: int, ratio: float, page_size: int) -> int:
    """SGLang's host pool tokens per rank for ``--hicache-ratio R``: ``int(device x R)``, page
    aligned, plus the extra page (159,274 x 4 -> 637,097 with pages of 1)."""
    return _page_aligned(int(device_tokens * ratio), page_size)


def host_pool_for_ratio(ratio: float, pool: DevicePool, page_size: int) -> HostPoolSize | None:
    """``--hicache-ratio R``: R x the device pool, plus the extra page; None if the pool is
    unknown."""
    if pool.tokens is not None:
        tokens = host_tokens_for_ratio(pool.tokens, ratio, page_size)
        if pool.bytes_per_token:
            return HostPoolSize(tokens=tokens, bytes=tokens * pool.bytes_per_token)
        return None
    if pool.kv_bytes is not None:
        return HostPoolSize(tokens=None, bytes=pool.kv_bytes * ratio)
    return None


def largest_size_within(budget_bytes: float, ranks: int, pool: DevicePool, page_size: int) -> int:
    """The largest whole ``--hicache-size`` whose pools on all ranks fit ``budget_bytes``
    (0 if none does)."""
    if budget_bytes <= 0:
        return 0
    size = int(budget_bytes / ranks // GB)
    while size > 0 and host_pool_for_size(size, pool, page_size).bytes * ranks > budget_bytes:
        size -= 1
    return size


def largest_ratio_within(
    budget_bytes: float, ranks: int, pool: DevicePool, page_size: int
) -> float | None:
    """The largest ratio, to one decimal, that fits ``budget_bytes`` (None if the pool is
    unknown)."""
    per_rank_pool = pool.kv_bytes
    if per_rank_pool is None or per_rank_pool <= 0:
        return None
    ratio = math.floor(budget_bytes / ranks / per_rank_pool * 10) / 10
    while ratio > 0:
        size = host_pool_for_ratio(ratio, pool, page_size)
        if size is None or size.bytes * ranks <= budget_bytes:
            break
        ratio = round(ratio - 0.1, 1)
    return max(ratio, 0.0)


def _page_aligned(tokens: int, page_size: int) -> int:
    return (tokens // page_size + 1) * page_size
