"""What a plan is made from: the requested change, the server's facts and the host's RAM."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from bot.errors import PlanInputError
from bot.planner._estimate import (
    DeviceMemory,
    DevicePoolEstimate,
    DevicePoolSource,
    estimate_device_pool,
)
from bot.planner._host_pools import HostPoolFlags, HybridPools
from bot.planner._kv_shape import KvShape
from bot.planner._sizing import DevicePool, HostExtra
from bot.planner._version import DEFAULT_SGLANG_VERSION, SGLangVersion

__all__ = ["ChangeRequest", "HostMemory", "ServerFacts", "num", "with_estimated_pool"]


def num(value: float) -> str:
    """4.0 -> "4", 44.5 -> "44.5", nan -> "nan"."""
    if math.isfinite(value) and value == int(value):
        return str(int(value))
    return f"{value:g}"


@dataclass(frozen=True)
class ChangeRequest:
    """A requested HiCache setting: a ratio, a size in GB per rank, or both (size wins, as in
    SGLang). Values are kept as given so the planner can say why SGLang would refuse them."""

    ratio: float | None = None
    size_gb: float | None = None

    def __post_init__(self) -> None:
        if self.ratio is None and self.size_gb is None:
            raise PlanInputError("a HiCache change needs a ratio or a size in GB per rank")

    @property
    def mode(self) -> str:
        return "size" if self.size_gb is not None else "ratio"

    def phrase(self) -> str:
        if self.size_gb is not None:
            return f"size {num(self.size_gb)} GB/rank"
        assert self.ratio is not None
        return f"ratio {num(self.ratio)}"


@dataclass(frozen=True)
class ServerFacts:
    """What is known of the server the change applies to.

    ``device_pool`` is the target model's pool, the one a ratio multiplies; ``device_pool_note``
    says which pool that is when the start logged several (a draft pool beside it), and
    ``device_pool_undecided`` why none could be told to be it. ``kv_shape`` comes from the
    model's ``config.json``; ``layer_bytes`` is one layer's KV bytes per token when only that is
    known. ``host_extras`` are the other host pools the last start logged (a DSA indexer).
    ``device_pool_source`` says where ``device_pool`` came from; with none, ``device_memory``
    lets the planner estimate it (``device_pool_missing`` says why it cannot).
    ``host_pool_flags`` are the command line's other host-pool flags (PD disaggregation, decode
    offload, host memory mode, storage backend and Mooncake's segment); ``hybrid_pools`` a
    hybrid sliding-window model's two device pools, each of which gets a host pool.
    """

    ranks: int
    device_pool: DevicePool = field(default_factory=DevicePool)
    page_size: int = 1
    version: SGLangVersion = DEFAULT_SGLANG_VERSION
    host_tokens_per_rank_now: int | None = None
    radix_cache_disabled: bool = False
    kv_shape: KvShape | None = None
    layer_bytes: int | None = None
    speculative: bool = False
    device_pool_note: str | None = None
    device_pool_undecided: str | None = None
    host_extras: tuple[HostExtra, ...] = ()
    device_pool_source: DevicePoolSource | None = None
    device_memory: DeviceMemory | None = None
    device_pool_missing: str | None = None
    host_pool_flags: HostPoolFlags = field(default_factory=HostPoolFlags)
    hybrid_pools: HybridPools | None = None

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise PlanInputError(f"local ranks must be at least 1, not {self.ranks}")
        if self.page_size < 1:
            raise PlanInputError(f"page size must be at least 1 token, not {self.page_size}")
        if self.layer_bytes is not None and self.layer_bytes < 1:
            raise PlanInputError(f"layer bytes must be at least 1, not {self.layer_bytes}")
        hybrid = self.hybrid_pools
        if hybrid is not None and (
            min(hybrid.full_tokens, hybrid.swa_tokens) < 1
            or min(hybrid.full_bytes_per_token, hybrid.swa_bytes_per_token) < 1
        ):
            raise PlanInputError(
                f"a hybrid model's pools need tokens and bytes per token of at least 1: {hybrid}"
            )
        for extra in self.host_extras:
            if not (extra.logged_gb >= 0 and extra.kv_logged_gb > 0):
                raise PlanInputError(
                    f"host pool {extra.name!r}: {extra.logged_gb!r} GB beside a KV host pool of "
                    f"{extra.kv_logged_gb!r} GB cannot be scaled; both must be logged sizes"
                )


@dataclass(frozen=True)
class HostMemory:
    """The server's memory domain as the agent reads it, in bytes.

    ``available_bytes`` is the host's MemAvailable; ``server_held_bytes`` what stopping the
    running server frees (each page once). When the server's cgroup sets a limit,
    ``cgroup_path`` names the level that binds (``/system.slice/sglang.service``),
    ``cgroup_limit_bytes`` its limit and ``cgroup_headroom_bytes`` what it leaves now (limit
    less usage less reclaimable file pages). ``total_bytes`` is the host's RAM, when known.
    """

    available_bytes: float
    server_held_bytes: float = 0
    cgroup_limit_bytes: float | None = None
    cgroup_headroom_bytes: float | None = None
    cgroup_path: str | None = None
    total_bytes: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "available_bytes",
            "server_held_bytes",
            "cgroup_limit_bytes",
            "cgroup_headroom_bytes",
            "total_bytes",
        ):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise PlanInputError(f"{name.replace('_', ' ')} must be >= 0, not {value!r}")
        if self.cgroup_headroom_bytes is not None and self.cgroup_limit_bytes is None:
            raise PlanInputError("a cgroup headroom needs the cgroup's limit beside it")

    @property
    def host_after_stop_bytes(self) -> float:
        """What the host alone has after the stop: MemAvailable plus what the stop frees,
        never more than its RAM."""
        free = self.available_bytes + self.server_held_bytes
        return free if self.total_bytes is None else min(free, self.total_bytes)

    @property
    def cgroup_after_stop_bytes(self) -> float | None:
        """What the server's cgroup allows after the stop: its headroom plus what the stop frees
        inside it, never more than its limit; None without a limit."""
        if self.cgroup_limit_bytes is None:
            return None
        if self.cgroup_headroom_bytes is None:
            return self.cgroup_limit_bytes
        return min(self.cgroup_headroom_bytes + self.server_held_bytes, self.cgroup_limit_bytes)

    @property
    def free_after_stop_bytes(self) -> float:
        """What the domain can give the restarted server: the smaller of the two."""
        cgroup = self.cgroup_after_stop_bytes
        host = self.host_after_stop_bytes
        return host if cgroup is None else min(host, cgroup)

    @property
    def cgroup_binds(self) -> bool:
        """Whether the cgroup, not the host, sets what the domain gives."""
        cgroup = self.cgroup_after_stop_bytes
        return cgroup is not None and cgroup < self.host_after_stop_bytes


def with_estimated_pool(
    server: ServerFacts, bytes_per_token: int | None
) -> tuple[DevicePoolEstimate | str | None, ServerFacts]:
    """With no device pool on record, the estimate (or why there is none) and the facts with
    its planned tokens as the pool; else None and the facts as they are."""
    pool = server.device_pool
    if pool.tokens is not None or pool.kv_bytes is not None:
        return None, server
    if server.device_memory is None or bytes_per_token is None:
        why = server.device_pool_missing
        if why is None and server.device_memory is not None:
            why = "the KV bytes per token are unknown (no readable config.json)"
        return why, server
    estimate = estimate_device_pool(server.device_memory, bytes_per_token, server.page_size)
    if isinstance(estimate, str):
        return estimate, server
    planned = DevicePool(tokens=estimate.planned_tokens, bytes_per_token=bytes_per_token)
    facts = replace(server, device_pool=planned, device_pool_source=DevicePoolSource.ESTIMATE)
    return estimate, facts
