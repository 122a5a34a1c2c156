"""SGLang's host-pool sizing rule, per rank (docs/sglang.md, Host pool sizing)::

    if hicache_size > 0:  tokens = int(hicache_size * 1e9 // size_per_token)
    else:                 tokens = int(device_tokens * hicache_ratio)
    pages = tokens // page_size + 1          # always one extra page
    tokens = pages * page_size
    bytes = tokens * size_per_token

``size_per_token`` comes from the model's config or the logged device pool (``_per_token``).
Extra host pools (a DSA indexer's) hold the same tokens as the KV host pool, so they grow with
it in the proportion the last start logged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bot.planner._units import GB, GiB


@dataclass(frozen=True)
class DevicePool:
    """What is known of one rank's device KV pool (the target model's).

    ``logged_kv_gib`` is the pool's size as SGLang logs it (GiB, two decimals); ``kv_bytes`` and
    ``bytes_per_token`` are exact figures when someone knows them.
    """

    tokens: int | None = None
    kv_bytes: float | None = None
    bytes_per_token: float | None = None
    logged_kv_gib: float | None = None

    @classmethod
    def from_log(cls, tokens: int | None, kv_gib: float | None) -> DevicePool:
        """From ``#tokens: N, KV size: X GB`` (X in GiB, rounded to two decimals), as logged."""
        return cls(
            tokens=tokens,
            kv_bytes=None if kv_gib is None else kv_gib * GiB,
            logged_kv_gib=kv_gib,
        )


@dataclass(frozen=True)
class HostPoolSize:
    """One rank's host pool: tokens (None when the bytes per token are unknown) and bytes."""

    tokens: int | None
    bytes: int

    @property
    def gb(self) -> float:
        return self.bytes / GB


@dataclass(frozen=True)
class HostExtra:
    """Another host allocation of each rank, as the last start logged it beside the KV host
    pool: ``Allocating 29.02 GB host memory for DSA indexer`` next to a 126.61 GB KV pool."""

    name: str
    logged_gb: float
    kv_logged_gb: float

    @property
    def factor(self) -> float:
        """Its bytes per KV host pool byte, at the top of the two-decimal rounding of both."""
        return (self.logged_gb + 0.005) / max(self.kv_logged_gb - 0.005, 0.005)


def extra_bytes(kv_bytes: int, extras: Sequence[HostExtra]) -> dict[str, int]:
    """Each extra host pool's bytes for a KV host pool of ``kv_bytes``, scaled as logged."""
    return {extra.name: math.ceil(kv_bytes * extra.factor) for extra in extras}


def with_extras(kv_bytes: int, extras: Sequence[HostExtra]) -> int:
    """All host RAM of one rank: the KV host pool and every extra pool."""
    return kv_bytes + sum(extra_bytes(kv_bytes, extras).values())


def host_pool_for_size(size_gb: int, pool: DevicePool, page_size: int) -> HostPoolSize:
    """``--hicache-size N``: whole GB (1e9) per rank, plus the extra page."""
    per_token = pool.bytes_per_token
    if not per_token:
        # Without the bytes per token the page rounding is unknowable; it is under one page.
        return HostPoolSize(tokens=None, bytes=size_gb * GB)
    tokens = _page_aligned(int(size_gb * GB // per_token), page_size)
    return HostPoolSize(tokens=tokens, bytes=math.ceil(tokens * per_token))


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
            return HostPoolSize(tokens=tokens, bytes=math.ceil(tokens * pool.bytes_per_token))
        return None
    if pool.kv_bytes is not None:
        return HostPoolSize(tokens=None, bytes=math.ceil(pool.kv_bytes * ratio))
    return None


def largest_size_within(
    budget_bytes: float,
    ranks: int,
    pool: DevicePool,
    page_size: int,
    extras: Sequence[HostExtra] = (),
) -> int:
    """The largest whole ``--hicache-size`` whose pools (and extra pools) on all ranks fit
    ``budget_bytes`` (0 if none does)."""
    if budget_bytes <= 0:
        return 0
    size = int(budget_bytes / ranks // GB)

    def needed(size: int) -> int:
        return with_extras(host_pool_for_size(size, pool, page_size).bytes, extras) * ranks

    while size > 0 and needed(size) > budget_bytes:
        size -= 1
    return size


def largest_ratio_within(
    budget_bytes: float,
    ranks: int,
    pool: DevicePool,
    page_size: int,
    extras: Sequence[HostExtra] = (),
) -> float | None:
    """The largest ratio, to one decimal, that fits ``budget_bytes`` (None if the pool is
    unknown)."""
    # Host bytes per unit of ratio: the device tokens at their bytes (or the pool's bytes),
    # with the extra pools; the loop below only corrects the page rounding.
    per_ratio = pool.kv_bytes
    if pool.tokens and pool.bytes_per_token:
        per_ratio = pool.tokens * pool.bytes_per_token
    if per_ratio is None or per_ratio <= 0:
        return None
    per_ratio *= 1 + sum(extra.factor for extra in extras)
    ratio = math.floor(budget_bytes / ranks / per_ratio * 10) / 10
    while ratio > 0:
        size = host_pool_for_ratio(ratio, pool, page_size)
        if size is None or with_extras(size.bytes, extras) * ranks <= budget_bytes:
            break
        ratio = round(ratio - 0.1, 1)
    return max(ratio, 0.0)


def _page_aligned(tokens: int, page_size: int) -> int:
    return (tokens // page_size + 1) * page_size
