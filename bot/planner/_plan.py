"""The plan of a HiCache change: every number an on-call engineer needs, and a verdict.

Budget rule (DESIGN.md, Safety rules)::

    free after stop = available host RAM + RAM held by the running server's process tree
                      (capped by the cgroup limit when there is one)
    budget          = free after stop - SGLang's 10 GiB reserve - headroom (default 40 GB)
    fits            = per-rank pool bytes x local ranks <= budget

SGLang sizes one pool per local rank (TP x PP x DP on the host): eight ranks of
``--hicache-size 300`` ask for 2.4 TB, which no 449 GB host has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from bot.errors import PlanInputError
from bot.planner._eta import StartSample, estimate_startup_seconds
from bot.planner._sizing import (
    DevicePool,
    HostPoolSize,
    host_pool_for_ratio,
    host_pool_for_size,
    largest_ratio_within,
    largest_size_within,
)
from bot.planner._units import GB, SGLANG_HOST_RESERVE_BYTES, GiB
from bot.planner._version import DEFAULT_SGLANG_VERSION, SGLangVersion

DEFAULT_HEADROOM_GB = 40.0


class Verdict(StrEnum):
    FITS = "fits"
    REFUSED = "refused"


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
            return f"size {_num(self.size_gb)} GB/rank"
        assert self.ratio is not None
        return f"ratio {_num(self.ratio)}"


@dataclass(frozen=True)
class ServerFacts:
    """What is known of the server the change applies to."""

    ranks: int
    device_pool: DevicePool = field(default_factory=DevicePool)
    page_size: int = 1
    version: SGLangVersion = DEFAULT_SGLANG_VERSION
    host_tokens_per_rank_now: int | None = None
    radix_cache_disabled: bool = False

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise PlanInputError(f"local ranks must be at least 1, not {self.ranks}")
        if self.page_size < 1:
            raise PlanInputError(f"page size must be at least 1 token, not {self.page_size}")


@dataclass(frozen=True)
class HostMemory:
    """Host RAM as the agent reads it, in bytes."""

    available_bytes: float
    server_held_bytes: float = 0
    cgroup_limit_bytes: float | None = None

    def __post_init__(self) -> None:
        for name in ("available_bytes", "server_held_bytes", "cgroup_limit_bytes"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise PlanInputError(f"{name.replace('_', ' ')} must be >= 0, not {value!r}")


@dataclass(frozen=True)
class Plan:
    """The planner's answer. Byte figures are floats (GB = 1e9; GiB only for the device pool)."""

    request: ChangeRequest
    verdict: Verdict
    reason: str
    ranks: int
    sglang_version: str
    page_size: int
    per_rank_tokens: int | None
    per_rank_bytes: float | None
    total_bytes: float | None
    available_bytes: float
    server_held_bytes: float
    cgroup_limit_bytes: float | None
    free_after_stop_bytes: float
    reserve_bytes: float
    headroom_bytes: float
    budget_bytes: float
    headroom_left_bytes: float | None
    device_tokens: int | None
    device_kv_bytes: float | None
    bytes_per_token: float | None
    host_tokens_before: int | None
    largest_fitting_size_gb: int
    largest_fitting_ratio: float | None
    expected_startup_s: float | None
    warnings: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return self.verdict is Verdict.FITS

    @property
    def per_rank_gb(self) -> float | None:
        return None if self.per_rank_bytes is None else self.per_rank_bytes / GB

    @property
    def total_gb(self) -> float | None:
        return None if self.total_bytes is None else self.total_bytes / GB

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, plus the GB figures a reader wants."""
        data = asdict(self)
        data["request"] = {"ratio": self.request.ratio, "size_gb": self.request.size_gb}
        data["mode"] = self.request.mode
        data["setting"] = self.request.phrase()
        data["verdict"] = self.verdict.value
        data["warnings"] = list(self.warnings)
        gb_fields = {
            "per_rank_gb": self.per_rank_bytes,
            "total_gb": self.total_bytes,
            "available_gb": self.available_bytes,
            "server_held_gb": self.server_held_bytes,
            "cgroup_limit_gb": self.cgroup_limit_bytes,
            "free_after_stop_gb": self.free_after_stop_bytes,
            "reserve_gb": self.reserve_bytes,
            "headroom_gb": self.headroom_bytes,
            "budget_gb": self.budget_bytes,
            "headroom_left_gb": self.headroom_left_bytes,
        }
        for key, value in gb_fields.items():
            data[key] = None if value is None else round(value / GB, 3)
        data["device_kv_gib"] = (
            None if self.device_kv_bytes is None else round(self.device_kv_bytes / GiB, 3)
        )
        return data


def make_plan(
    request: ChangeRequest,
    server: ServerFacts,
    memory: HostMemory,
    headroom_gb: float = DEFAULT_HEADROOM_GB,
    history: Sequence[StartSample] = (),
) -> Plan:
    """Size ``request`` on ``server`` exactly as SGLang will, and check it fits ``memory``."""
    if not math.isfinite(headroom_gb) or headroom_gb < 0:
        raise PlanInputError(f"headroom must be a number of GB >= 0, not {headroom_gb!r}")
    pool = server.device_pool.resolved()
    free_after_stop = memory.available_bytes + memory.server_held_bytes
    if memory.cgroup_limit_bytes is not None:
        free_after_stop = min(free_after_stop, memory.cgroup_limit_bytes)
    headroom = headroom_gb * GB
    budget = free_after_stop - SGLANG_HOST_RESERVE_BYTES - headroom
    warnings: list[str] = []
    if request.size_gb is not None and request.ratio is not None:
        warnings.append(f"size wins: ratio {_num(request.ratio)} is ignored, as SGLang does")

    rule_refusal = _sglang_would_reject(request, server, pool)
    size: HostPoolSize | None = None
    if rule_refusal is None:
        size = _host_pool(request, pool, server.page_size)
        if size is None:
            rule_refusal = (
                f"{request.phrase()} needs the device pool's size, which is unknown (no running "
                "server, startup log or recorded start gives it); ask for a size in GB instead"
            )
    if size is not None and rule_refusal is None:
        rule_refusal = _host_not_larger(request, size, pool, server.version, warnings)

    total = None if size is None else size.bytes * server.ranks
    left = None if total is None else budget - total
    largest_size = largest_size_within(budget, server.ranks, pool, server.page_size)
    largest_ratio = largest_ratio_within(budget, server.ranks, pool, server.page_size)
    if server.version.asserts_host_larger and pool.tokens is not None:
        # Suggest nothing SGLang <= 0.5.12 would refuse: pools grow with the size and the ratio,
        # so if the largest that fits is not larger than the device pool, none is.
        if largest_size and not _larger_than_device(
            host_pool_for_size(largest_size, pool, server.page_size), pool
        ):
            largest_size = 0
        if largest_ratio and not _larger_than_device(
            host_pool_for_ratio(largest_ratio, pool, server.page_size), pool
        ):
            largest_ratio = 0.0
    if rule_refusal is not None:
        verdict, reason = Verdict.REFUSED, _sentence(rule_refusal)
    else:
        assert size is not None
        assert total is not None
        assert left is not None
        verdict = Verdict.FITS if left >= 0 else Verdict.REFUSED
        reason = _budget_sentence(
            request, server.ranks, size, total, memory, free_after_stop, headroom, budget, left
        )
        if verdict is Verdict.REFUSED:
            reason = reason[:-1] + _suggestion(request, largest_size, largest_ratio) + "."
    expected = None
    if size is not None:
        expected = estimate_startup_seconds(history, size.bytes / GB)
    return Plan(
        request=request,
        verdict=verdict,
        reason=reason,
        ranks=server.ranks,
        sglang_version=str(server.version),
        page_size=server.page_size,
        per_rank_tokens=None if size is None else size.tokens,
        per_rank_bytes=None if size is None else size.bytes,
        total_bytes=total,
        available_bytes=memory.available_bytes,
        server_held_bytes=memory.server_held_bytes,
        cgroup_limit_bytes=memory.cgroup_limit_bytes,
        free_after_stop_bytes=free_after_stop,
        reserve_bytes=SGLANG_HOST_RESERVE_BYTES,
        headroom_bytes=headroom,
        budget_bytes=budget,
        headroom_left_bytes=left,
        device_tokens=pool.tokens,
        device_kv_bytes=pool.kv_bytes,
        bytes_per_token=pool.bytes_per_token,
        host_tokens_before=server.host_tokens_per_rank_now,
        largest_fitting_size_gb=largest_size,
        largest_fitting_ratio=largest_ratio,
        expected_startup_s=expected,
        warnings=tuple(warnings),
    )


def _larger_than_device(size: HostPoolSize | None, pool: DevicePool) -> bool:
    return size is None or size.tokens is None or pool.tokens is None or size.tokens > pool.tokens


def _sglang_would_reject(
    request: ChangeRequest, server: ServerFacts, pool: DevicePool
) -> str | None:
    if server.radix_cache_disabled:
        return (
            "HiCache cannot run with --disable-radix-cache (SGLang raises ValueError at start); "
            "remove that flag first"
        )
    if request.size_gb is not None:
        size = request.size_gb
        if not math.isfinite(size) or size != int(size):
            hint = ""
            if math.isfinite(size) and size > 0:
                hint = f" (try {math.floor(size)} or {math.ceil(size)})"
            return (
                f"hicache size '{_num(size)}' is not a whole number of GB; "
                f"SGLang takes integers{hint}"
            )
        if size <= 0:
            return (
                f"hicache size '{_num(size)}' must be at least 1 GB per rank "
                "(0 tells SGLang to use the ratio instead)"
            )
        return None
    assert request.ratio is not None
    ratio = request.ratio
    if not math.isfinite(ratio):
        return f"hicache ratio '{_num(ratio)}' is not a finite number; try 2 or 4"
    if ratio <= 0:
        return (
            f"hicache ratio '{_num(ratio)}' must be greater than 0; "
            "the host pool is ratio x the device pool"
        )
    return None


def _host_pool(request: ChangeRequest, pool: DevicePool, page_size: int) -> HostPoolSize | None:
    if request.size_gb is not None:
        return host_pool_for_size(int(request.size_gb), pool, page_size)
    assert request.ratio is not None
    return host_pool_for_ratio(request.ratio, pool, page_size)


def _host_not_larger(
    request: ChangeRequest,
    size: HostPoolSize,
    pool: DevicePool,
    version: SGLangVersion,
    warnings: list[str],
) -> str | None:
    if size.tokens is None or pool.tokens is None or size.tokens > pool.tokens:
        return None
    detail = (
        f"{request.phrase()} gives a host pool of {size.tokens:,} tokens per rank, "
        f"not larger than the device pool's {pool.tokens:,}"
    )
    if version.asserts_host_larger:
        return (
            f'{detail}: SGLang {version} refuses that ("The host memory should be larger than '
            'the device memory with the current protocol")'
        )
    warnings.append(f"{detail}: SGLang {version} starts, but HiCache adds little")
    return None


def _budget_sentence(
    request: ChangeRequest,
    ranks: int,
    size: HostPoolSize,
    total: float,
    memory: HostMemory,
    free_after_stop: float,
    headroom: float,
    budget: float,
    left: float,
) -> str:
    """ "ratio 4 needs 8 ranks x 44.75 GB = 358.0 GB; 445.0 GB free after stop - 10.7 GB SGLang
    reserve - 40.0 GB headroom leaves 394.3 GB: fits with 36.3 GB to spare." """
    free = f"{free_after_stop / GB:.1f} GB free after stop"
    if memory.server_held_bytes:
        free += (
            f" ({memory.available_bytes / GB:.1f} available + "
            f"{memory.server_held_bytes / GB:.1f} released by the restart"
        )
        if free_after_stop < memory.available_bytes + memory.server_held_bytes:
            free += ", capped by the cgroup limit"
        free += ")"
    elif free_after_stop < memory.available_bytes:
        free += " (capped by the cgroup limit)"
    outcome = (
        f"fits with {left / GB:.1f} GB to spare"
        if left >= 0
        else f"refused, {-left / GB:.1f} GB short"
    )
    return (
        f"{request.phrase()} needs {ranks} rank{'s' if ranks != 1 else ''} x "
        f"{size.bytes / GB:.2f} GB = {total / GB:.1f} GB; {free} - "
        f"{SGLANG_HOST_RESERVE_BYTES / GB:.1f} GB SGLang reserve - {headroom / GB:.1f} GB headroom "
        f"leaves {budget / GB:.1f} GB: {outcome}."
    )


def _suggestion(request: ChangeRequest, largest_size: int, largest_ratio: float | None) -> str:
    if request.mode == "ratio" and largest_ratio:
        return f"; at most ratio {largest_ratio:g} fits (or size {largest_size} GB/rank)"
    if largest_size > 0:
        return f"; at most size {largest_size} GB/rank fits"
    return "; no HiCache size fits this host now"


def _sentence(text: str) -> str:
    return text if text.endswith(".") else text + "."


def _num(value: float) -> str:
    """4.0 -> "4", 44.5 -> "44.5", nan -> "nan"."""
    if math.isfinite(value) and value == int(value):
        return str(int(value))
    return f"{value:g}"
