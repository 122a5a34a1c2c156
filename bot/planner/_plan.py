"""The plan of a HiCache change: every number an on-call engineer needs, and a verdict.

Budget rule (README.md, The budget rule)::

    free after stop = min(available host RAM + what the restart frees (at most the host's RAM),
                          the server's cgroup headroom + what the restart frees (at most the
                          cgroup's limit)), as SGLang's available_host_memory_bytes; what the
                      restart frees is each page once (PSS, or the server's own cgroup usage)
    budget          = free after stop - SGLang's 10 GiB reserve - headroom (default 40 GB)
    per rank        = every host pool of one rank (``_host_pools``): the KV host pool (a hybrid
                      model's full and sliding-window pools), a decode server's offload pool,
                      Mooncake's segment, and every extra host pool (a DSA indexer) scaled with
                      the KV host pool in the proportion the last start logged
    fits            = per rank x local ranks <= budget

A ratio multiplies the target model's device pool (never a draft model's pool beside it); when
the pool cannot be told, the ratio is refused with the reason (``refused_by`` missing_facts).
When no start ever logged the pool, it is estimated from the model's files and the GPUs, an
upper bound planned with a margin (``_estimate``): ``device_pool_source`` is then "estimate".

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
from bot.planner._estimate import DevicePoolEstimate, DevicePoolSource
from bot.planner._eta import StartSample, estimate_startup_seconds
from bot.planner._facts import ChangeRequest, HostMemory, ServerFacts, num, with_estimated_pool
from bot.planner._host_pools import (
    SWA_POOL,
    HostPoolPlan,
    hybrid_pools_for_ratio,
    hybrid_pools_for_size,
    mooncake_pools,
    rejected_by_sglang,
    unknown_configuration,
)
from bot.planner._per_token import BytesPerToken, BytesSource, resolve_bytes_per_token
from bot.planner._sizing import (
    DevicePool,
    HostPoolSize,
    extra_bytes,
    host_pool_for_ratio,
    host_pool_for_size,
    largest_ratio_within,
    largest_size_within,
)
from bot.planner._units import GB, SGLANG_HOST_RESERVE_BYTES, GiB
from bot.planner._wording import (
    budget_sentence,
    host_not_larger,
    larger_than_device,
    sentence,
    sglang_would_reject,
    suggestion,
)
from bot.vocab import RefusedBy

__all__ = [
    "DEFAULT_HEADROOM_GB",
    "ChangeRequest",
    "HostMemory",
    "Plan",
    "ServerFacts",
    "Verdict",
    "make_plan",
]

DEFAULT_HEADROOM_GB = 40.0


class Verdict(StrEnum):
    FITS = "fits"
    REFUSED = "refused"


@dataclass(frozen=True)
class Plan:
    """The planner's answer. Bytes are whole bytes (GB = 1e9; GiB only for the device pool).

    ``per_rank_bytes`` is the KV host pool of one rank, as SGLang will allocate it;
    ``per_rank_total_bytes`` adds the extra host pools (``host_extra_bytes_per_rank``), and
    ``total_bytes`` is that across all ranks: what the budget counts. ``bytes_per_token_source``
    names where the KV bytes per token came from (``config``, ``log``, ``log_upper_bound`` or
    ``given``) and ``bytes_per_token_uncertainty`` how far the true figure can be below it.
    ``refused_by`` names the rule that refused the plan. ``notes`` say which pool a ratio
    multiplies, where the bytes per token came from and how extra pools were scaled.
    ``device_pool_source`` names where the device pool came from; for "estimate",
    ``device_pool_estimate`` holds the figures (``device_tokens`` is then its planned tokens).
    ``host_pools`` is every host allocation of one rank, the KV host pool first, each with the
    rule that sized it; ``host_extra_bytes_per_rank`` holds all but the first by name.
    """

    request: ChangeRequest
    verdict: Verdict
    reason: str
    ranks: int
    sglang_version: str
    page_size: int
    per_rank_tokens: int | None
    per_rank_bytes: int | None
    total_bytes: int | None
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
    refused_by: RefusedBy | None = None
    bytes_per_token_source: BytesSource | None = None
    bytes_per_token_low: int | None = None
    bytes_per_token_high: int | None = None
    bytes_per_token_uncertainty: float | None = None
    ratio_pool: str | None = None
    host_extra_bytes_per_rank: dict[str, int] = field(default_factory=dict)
    per_rank_total_bytes: int | None = None
    notes: tuple[str, ...] = ()
    device_pool_source: DevicePoolSource | None = None
    device_pool_estimate: DevicePoolEstimate | None = None
    host_pools: tuple[HostPoolPlan, ...] = ()

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
        data["notes"] = list(self.notes)
        data["refused_by"] = None if self.refused_by is None else self.refused_by.value
        data["bytes_per_token_source"] = (
            None if self.bytes_per_token_source is None else self.bytes_per_token_source.value
        )
        data["device_pool_source"] = (
            None if self.device_pool_source is None else self.device_pool_source.value
        )
        data["host_pools"] = [
            {**asdict(pool), "gb": round(pool.bytes / GB, 3)} for pool in self.host_pools
        ]
        data["host_extra_gb_per_rank"] = {
            name: round(value / GB, 3) for name, value in self.host_extra_bytes_per_rank.items()
        }
        gb_fields = {
            "per_rank_gb": self.per_rank_bytes,
            "per_rank_total_gb": self.per_rank_total_bytes,
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
    per_token, bpt_warnings = _bytes_per_token(server)
    estimate: DevicePoolEstimate | str | None = None
    if request.size_gb is None:
        # Only a ratio needs the pool. An upper bound must never refuse a size: SGLang <= 0.5.12
        # compares the host pool with the real device pool, which can be far smaller.
        bytes_per_token = None if per_token is None else per_token.value
        estimate, server = with_estimated_pool(server, bytes_per_token)
    pool = _resolved_pool(server, per_token)
    free_after_stop = memory.free_after_stop_bytes
    headroom = headroom_gb * GB
    budget = free_after_stop - SGLANG_HOST_RESERVE_BYTES - headroom
    warnings: list[str] = list(bpt_warnings)
    notes: list[str] = []
    if request.size_gb is not None and request.ratio is not None:
        warnings.append(f"size wins: ratio {num(request.ratio)} is ignored, as SGLang does")
    ratio_pool = _ratio_pool(request, server, pool)
    if ratio_pool is not None:
        notes.append(f"ratio multiplies {ratio_pool}")
    if per_token is not None:
        notes.append(f"KV bytes per token {per_token.value:,}: {per_token.note}")
    if isinstance(estimate, DevicePoolEstimate):
        notes.append(estimate.describe())

    refused_by: RefusedBy | None = None
    refusal = sglang_would_reject(request, server, pool)
    if refusal is None:
        refusal = rejected_by_sglang(server.host_pool_flags, server.hybrid_pools is not None)
    if refusal is not None:
        refused_by = RefusedBy.SGLANG
    else:
        refusal = unknown_configuration(server.host_pool_flags)
        if refusal is not None:
            refused_by = RefusedBy.MISSING_FACTS
    size: HostPoolSize | None = None
    if refusal is None:
        refusal = _undecided(request, server)
        if refusal is None:
            size = _host_pool(request, pool, server.page_size, per_token)
            if server.hybrid_pools is not None:
                size = _hybrid_pools(request, server)[0]
            if size is None:
                unknown = "" if estimate is None else f", and it cannot be estimated: {estimate}"
                refusal = (
                    f"{request.phrase()} needs the device pool's size, which is unknown (no "
                    f"running server, startup log or recorded start gives it{unknown}); ask for "
                    "a size in GB instead"
                )
        if refusal is not None:
            refused_by = RefusedBy.MISSING_FACTS
    if size is not None and refusal is None:
        refusal = host_not_larger(request, size, pool, server.version, warnings)
        if refusal is not None:
            refused_by = RefusedBy.SGLANG

    extras: dict[str, int] = {}
    per_rank_total: int | None = None
    pools: tuple[HostPoolPlan, ...] = ()
    if size is not None:
        pools = _rank_pools(request, server, size)
        extras = {p.name: p.bytes for p in pools[1:]}
        per_rank_total = sum(p.bytes for p in pools)
        for extra in server.host_extras:
            notes.append(
                f"{extra.name} host pool scaled with the KV host pool as the last start logged "
                f"({extra.logged_gb:.2f} GB beside {extra.kv_logged_gb:.2f} GB): "
                f"{extras[extra.name] / GB:.2f} GB per rank"
            )
        notes.extend(f"{p.name} host pool: {p.rule}" for p in pools if p.rule)
    total = None if per_rank_total is None else per_rank_total * server.ranks
    left = None if total is None else budget - total
    largest_size, largest_ratio = _largest(budget, server, pool)
    if _has_own_pools(server):
        largest_size, largest_ratio = _largest_over_pools(budget, server, pool, per_token)
    if refusal is not None:
        verdict, reason = Verdict.REFUSED, sentence(refusal)
    else:
        assert size is not None
        assert total is not None
        assert left is not None
        verdict = Verdict.FITS if left >= 0 else Verdict.REFUSED
        reason = budget_sentence(
            request,
            server.ranks,
            size,
            total,
            memory,
            free_after_stop,
            headroom,
            budget,
            left,
            extras,
        )
        if verdict is Verdict.REFUSED:
            refused_by = RefusedBy.BUDGET
            reason = reason[:-1] + suggestion(request, largest_size, largest_ratio) + "."
    expected = None
    if size is not None and verdict is Verdict.FITS:
        # A refused change never starts: a startup time for it ("~909:04" for 99,999 GB a
        # rank) reads as a promise.
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
        refused_by=refused_by,
        bytes_per_token_source=None if per_token is None else per_token.source,
        bytes_per_token_low=None if per_token is None else per_token.low,
        bytes_per_token_high=None if per_token is None else per_token.high,
        bytes_per_token_uncertainty=None if per_token is None else per_token.uncertainty,
        ratio_pool=ratio_pool,
        host_extra_bytes_per_rank=extras,
        per_rank_total_bytes=per_rank_total,
        notes=tuple(notes),
        device_pool_source=None if pool.kv_bytes is None else server.device_pool_source,
        device_pool_estimate=estimate if isinstance(estimate, DevicePoolEstimate) else None,
        host_pools=pools,
    )


def _bytes_per_token(server: ServerFacts) -> tuple[BytesPerToken | None, tuple[str, ...]]:
    pool = server.device_pool
    given = pool.bytes_per_token
    if given is None and pool.logged_kv_gib is None and pool.kv_bytes and pool.tokens:
        given = pool.kv_bytes / pool.tokens  # exact bytes given, not a logged figure
    return resolve_bytes_per_token(
        tokens=pool.tokens,
        logged_kv_gib=pool.logged_kv_gib,
        page_size=server.page_size,
        given=given,
        shape=server.kv_shape,
        layer_bytes=server.layer_bytes,
        speculative=server.speculative,
    )


def _resolved_pool(server: ServerFacts, per_token: BytesPerToken | None) -> DevicePool:
    """The device pool with whole bytes per token, and its bytes (as logged when logged)."""
    pool = server.device_pool
    value = None if per_token is None else per_token.value
    kv_bytes = pool.kv_bytes
    if kv_bytes is None and value is not None and pool.tokens is not None:
        kv_bytes = float(value * (pool.tokens + server.page_size))
    tokens = pool.tokens
    if tokens is None and kv_bytes is not None and value:
        tokens = int(kv_bytes // value) - server.page_size
    return DevicePool(
        tokens=tokens, kv_bytes=kv_bytes, bytes_per_token=value, logged_kv_gib=pool.logged_kv_gib
    )


def _ratio_pool(request: ChangeRequest, server: ServerFacts, pool: DevicePool) -> str | None:
    """Which pool a ratio multiplies, in words; None for a size or an unknown pool."""
    if request.size_gb is not None or pool.tokens is None:
        return None
    size = "" if pool.logged_kv_gib is None else f", {pool.logged_kv_gib:.2f} GiB per rank"
    if server.device_pool_source is DevicePoolSource.ESTIMATE:
        size = ", estimated with its margin"
    text = f"the target model's device pool ({pool.tokens:,} tokens{size})"
    if server.device_pool_note:
        text += f"; {server.device_pool_note}"
    return text


def _undecided(request: ChangeRequest, server: ServerFacts) -> str | None:
    if request.size_gb is not None or server.device_pool_undecided is None:
        return None
    return (
        f"{request.phrase()} multiplies the target model's device pool, and the last start's "
        f"log does not say which pool that is ({server.device_pool_undecided}); ask for a size "
        "in GB instead"
    )


def _largest(budget: float, server: ServerFacts, pool: DevicePool) -> tuple[int, float | None]:
    """The largest size and ratio that fit, suggesting nothing SGLang would refuse."""
    extras = server.host_extras
    largest_size = largest_size_within(budget, server.ranks, pool, server.page_size, extras)
    largest_ratio = largest_ratio_within(budget, server.ranks, pool, server.page_size, extras)
    if server.device_pool_undecided is not None:
        largest_ratio = None
    if server.version.asserts_host_larger and pool.tokens is not None:
        # Suggest nothing SGLang <= 0.5.12 would refuse: pools grow with the size and the ratio,
        # so if the largest that fits is not larger than the device pool, none is.
        if largest_size and not larger_than_device(
            host_pool_for_size(largest_size, pool, server.page_size), pool
        ):
            largest_size = 0
        if largest_ratio and not larger_than_device(
            host_pool_for_ratio(largest_ratio, pool, server.page_size), pool
        ):
            largest_ratio = 0.0
    return largest_size, largest_ratio


def _host_pool(
    request: ChangeRequest, pool: DevicePool, page_size: int, per_token: BytesPerToken | None
) -> HostPoolSize | None:
    if request.size_gb is not None:
        size = host_pool_for_size(int(request.size_gb), pool, page_size)
        if per_token is not None and per_token.low < per_token.value and size.tokens is not None:
            # An uncertain figure: SGLang's tokens at the true bytes per token can be more,
            # and its bytes up to one page over the size: count that page at the top.
            ceiling = int(request.size_gb) * GB + page_size * per_token.value
            return HostPoolSize(tokens=size.tokens, bytes=max(size.bytes, ceiling))
        return size
    assert request.ratio is not None
    return host_pool_for_ratio(request.ratio, pool, page_size)


def _hybrid_pools(request: ChangeRequest, server: ServerFacts) -> tuple[HostPoolSize, HostPoolSize]:
    """A hybrid sliding-window model's full and sliding-window host pools for ``request``."""
    hybrid = server.hybrid_pools
    assert hybrid is not None
    if request.size_gb is not None:
        return hybrid_pools_for_size(int(request.size_gb), hybrid, server.page_size, server.version)
    assert request.ratio is not None
    return hybrid_pools_for_ratio(request.ratio, hybrid, server.page_size)


def _rank_pools(
    request: ChangeRequest, server: ServerFacts, size: HostPoolSize
) -> tuple[HostPoolPlan, ...]:
    """Every host allocation of one rank for ``request``, the KV host pool (``size``) first."""
    setting = request.phrase()
    flags = server.host_pool_flags
    pools: list[HostPoolPlan] = []
    if server.hybrid_pools is not None:
        full, swa = _hybrid_pools(request, server)
        split = ""
        if request.size_gb is not None:
            split = (
                ", the size split by the pools' device bytes"
                if server.version.splits_hybrid_hicache_size
                else f", the whole size for each pool (SGLang {server.version})"
            )
        pools.append(
            HostPoolPlan("KV", full.bytes, full.tokens, f"full-attention, {setting}{split}")
        )
        pools.append(
            HostPoolPlan(SWA_POOL, swa.bytes, swa.tokens, f"sliding-window, {setting}{split}")
        )
    else:
        pools.append(HostPoolPlan("KV", size.bytes, size.tokens, ""))
    for name, value in extra_bytes(size.bytes, server.host_extras).items():
        pools.append(HostPoolPlan(name, value, None, ""))
    clients = 1 if flags.storage_backend is not None else 0
    if flags.decode and flags.decode_offload:
        # The offload manager builds its own KV host pool and storage client, by the same rule.
        pools.append(
            HostPoolPlan(
                "decode offload KV",
                size.bytes,
                size.tokens,
                f"a second KV host pool for decode offload, {setting}",
            )
        )
        clients += 1
    pools.extend(mooncake_pools(flags, clients))
    return tuple(pools)


def _has_own_pools(server: ServerFacts) -> bool:
    """Whether the server has host pools beside the KV pool and its logged extras."""
    flags = server.host_pool_flags
    return (
        server.hybrid_pools is not None
        or flags.decode_offload
        or (flags.storage_backend is not None and flags.mooncake is not None)
    )


def _largest_over_pools(
    budget: float, server: ServerFacts, pool: DevicePool, per_token: BytesPerToken | None
) -> tuple[int, float | None]:
    """The largest size and ratio whose host pools on all ranks fit, counting every pool."""

    def total(request: ChangeRequest) -> int | None:
        size = _host_pool(request, pool, server.page_size, per_token)
        if server.hybrid_pools is not None:
            size = _hybrid_pools(request, server)[0]
        if size is None:
            return None
        return sum(p.bytes for p in _rank_pools(request, server, size)) * server.ranks

    def fits(request: ChangeRequest) -> bool:
        needed = total(request)
        return needed is not None and needed <= budget

    if budget <= 0:
        return 0, 0.0
    low, high = 0, int(budget / server.ranks // GB) + 1
    while low + 1 < high:  # the pools grow with the size: the last size that fits
        middle = (low + high) // 2
        low, high = (middle, high) if fits(ChangeRequest(size_gb=middle)) else (low, middle)
    largest_size = low
    if total(ChangeRequest(ratio=1.0)) is None or server.device_pool_undecided is not None:
        return largest_size, None
    tenths, top = 0, 1
    while fits(ChangeRequest(ratio=top / 10)) and top < 1_000_000:
        tenths, top = top, top * 2
    while tenths + 1 < top:
        middle = (tenths + top) // 2
        tenths, top = (middle, top) if fits(ChangeRequest(ratio=middle / 10)) else (tenths, middle)
    return largest_size, tenths / 10
