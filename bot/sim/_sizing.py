"""SGLang's sizing rules as the simulated server applies them (docs/sglang.md, Host pool sizing)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GIB", "RESERVE_BYTES", "HostPool", "host_pool", "kv_gib"]

GIB = 1024**3
#: SGLang keeps 10 GiB of host RAM out of the HiCache budget.
RESERVE_BYTES = 10 * GIB


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
