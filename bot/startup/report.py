"""The report of one start, folded from the parser's events: timeline, figures, failure.

``build_report(events)`` takes the events of a whole log; ``ReportBuilder`` takes them one at a
time (the file reader uses it so memory stays flat however long the log is). When the log holds
several starts (a restart, a rollback), the report is about the last one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from bot.startup.events import (
    KV_HOST_POOL,
    DevicePool,
    Dialect,
    DialectDetected,
    Event,
    FailureKind,
    FailureSeen,
    GraphProgress,
    HostPool,
    MaxTotalTokens,
    MemoryHeadroom,
    Phase,
    PhaseStarted,
    PoolKind,
    RankSeen,
    ShardProgress,
    SlidingWindowPool,
    SlidingWindowSplit,
)

__all__ = [
    "Failure",
    "PhaseSpan",
    "PoolFigures",
    "ReportBuilder",
    "SlidingWindowFigures",
    "StartupReport",
    "build_report",
    "classify_pools",
]

# Key for lines without a rank prefix (a single-GPU server's scheduler logs none).
NO_RANK = ""

_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One phase of the timeline; ``end`` is the next phase's start (``None`` while it runs)."""

    phase: Phase
    start: datetime | None
    end: datetime | None

    @property
    def seconds(self) -> float | None:
        """How long the phase took, or ``None`` when either end is unknown."""
        if self.start is None or self.end is None:
            return None
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True, slots=True)
class Failure:
    """How the start failed and the log lines that say so."""

    kind: FailureKind
    lines: tuple[str, ...]
    at: datetime | None


@dataclass(frozen=True, slots=True)
class PoolFigures:
    """One device KV pool of a rank, by kind: ``tokens`` as logged (or ``max_total_num_tokens``
    when the line has no count) and ``kv_gib`` as logged (GiB, two decimals; K + V for MHA)."""

    kind: PoolKind
    tokens: int | None
    kv_gib: float
    label: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "tokens": self.tokens,
            "kv_gib": self.kv_gib,
            "label": self.label,
        }


@dataclass(frozen=True, slots=True)
class SlidingWindowFigures:
    """A hybrid sliding-window model's two device pools of the first rank: the full-attention
    and sliding-window tokens, and ``kv_gib`` both pools' GiB as ``SWAKVPool`` logged them
    (None until that line). ``full_kv_gib`` and ``swa_kv_gib`` are each pool's own line
    (``Full KV Cache is allocated. ...``, ``SWA KV Cache is allocated. ...``), when logged."""

    full_tokens: int
    swa_tokens: int
    kv_gib: float | None = None
    full_kv_gib: float | None = None
    swa_kv_gib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "full_tokens": self.full_tokens,
            "swa_tokens": self.swa_tokens,
            "kv_gib": self.kv_gib,
            "full_kv_gib": self.full_kv_gib,
            "swa_kv_gib": self.swa_kv_gib,
        }


@dataclass(frozen=True, slots=True)
class StartupReport:
    """Everything one start's log says: what a person or the agent wants to know about it.

    Per-rank mappings are keyed by the rank prefix (``"TP3"``), or ``""`` for lines without one
    (a single-process server: one rank). ``device_tokens`` is ``max_total_num_tokens`` (the device
    pool, never device + host). The device pool of a rank is the target model's: the first pool
    logged with ``max_total_num_tokens`` tokens (the only one, or the first, when that line is not
    logged yet); ``kv_gib_per_rank`` is its size, ``draft_pool`` a speculative-decoding draft
    model's pool beside it, and ``pools`` every pool of the first rank by kind. When a rank logged
    several pools before graph capture and none can be told to be the target's,
    ``device_pool_undecided`` says why and the per-rank device figures are empty.
    ``host_gb_per_rank`` is the HiCache KV host pool, ``host_extra_gb_per_rank`` every other host
    allocation by name (a DSA indexer), and ``host_total_gb_per_rank`` their sum: all RAM.
    ``sliding_window`` holds a hybrid sliding-window model's two device pools; its full-attention
    pool is the target's even before ``max_total_num_tokens`` is logged.
    """

    dialect: Dialect | None
    phases: tuple[PhaseSpan, ...]
    ranks: tuple[str, ...]
    shards: tuple[int, int] | None
    cuda_graphs: tuple[int, int] | None
    device_tokens: int | None
    device_tokens_per_rank: dict[str, int]
    kv_gib_per_rank: dict[str, float]
    host_gb_per_rank: dict[str, float]
    host_tokens_per_rank: dict[str, int]
    ready: bool
    ready_at: datetime | None
    failure: Failure | None
    pools: tuple[PoolFigures, ...] = ()
    draft_pool: PoolFigures | None = None
    device_pool_undecided: str | None = None
    host_extra_gb_per_rank: dict[str, dict[str, float]] = field(default_factory=dict)
    host_total_gb_per_rank: dict[str, float] = field(default_factory=dict)
    sliding_window: SlidingWindowFigures | None = None
    #: SGLang's own ``HiCache memory headroom: host X GiB, cgroup Y GiB`` line (the first
    #: rank's), when it logged one: what it saw before sizing the host pools.
    sglang_headroom: MemoryHeadroom | None = None

    @property
    def started_at(self) -> datetime | None:
        """When the first phase began."""
        return self.phases[0].start if self.phases else None

    @property
    def startup_seconds(self) -> float | None:
        """From the first phase to ready, or ``None`` if the start did not become ready."""
        if self.ready_at is None or self.started_at is None:
            return None
        return (self.ready_at - self.started_at).total_seconds()

    @property
    def host_gb_total(self) -> float:
        """Host RAM the start allocated, GB (1e9 bytes): every host pool of every rank."""
        return round(sum(self.host_total_gb_per_rank.values()), 2)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping; times as ISO-8601 strings."""
        return {
            "dialect": None if self.dialect is None else self.dialect.value,
            "phases": [
                {
                    "name": span.phase.value,
                    "start": _iso(span.start),
                    "end": _iso(span.end),
                    "seconds": span.seconds,
                }
                for span in self.phases
            ],
            "ranks": list(self.ranks),
            "rank_count": len(self.ranks),
            "shards": None if self.shards is None else list(self.shards),
            "cuda_graphs": None if self.cuda_graphs is None else list(self.cuda_graphs),
            "device_tokens": self.device_tokens,
            "device_tokens_per_rank": dict(self.device_tokens_per_rank),
            "kv_gib_per_rank": dict(self.kv_gib_per_rank),
            "host_gb_per_rank": dict(self.host_gb_per_rank),
            "host_extra_gb_per_rank": {r: dict(v) for r, v in self.host_extra_gb_per_rank.items()},
            "host_total_gb_per_rank": dict(self.host_total_gb_per_rank),
            "host_gb_total": self.host_gb_total,
            "pools": [pool.to_dict() for pool in self.pools],
            "draft_pool": None if self.draft_pool is None else self.draft_pool.to_dict(),
            "device_pool_undecided": self.device_pool_undecided,
            "host_tokens_per_rank": dict(self.host_tokens_per_rank),
            "sliding_window": None
            if self.sliding_window is None
            else self.sliding_window.to_dict(),
            "sglang_headroom": None
            if self.sglang_headroom is None
            else {
                "host_gib": self.sglang_headroom.host_gib,
                "cgroup_gib": self.sglang_headroom.cgroup_gib,
                "headroom_gib": self.sglang_headroom.headroom_gib,
            },
            "ready": self.ready,
            "ready_at": _iso(self.ready_at),
            "started_at": _iso(self.started_at),
            "startup_seconds": self.startup_seconds,
            "failure": None
            if self.failure is None
            else {"kind": self.failure.kind.value, "lines": list(self.failure.lines)},
        }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def rank_sort_key(rank: str) -> tuple[tuple[str, int], ...]:
    """Order ``TP2`` before ``TP10`` and ``DP0 TP7`` before ``DP1 TP0``."""
    return tuple((name, int(number)) for name, number in re.findall(r"([A-Z_]+)(\d+)", rank))


class ReportBuilder:
    """Folds events into a ``StartupReport``, one at a time."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._dialect: Dialect | None = None
        self._starts: list[tuple[Phase, datetime | None]] = []
        self._ranks: set[str] = set()
        self._shards: tuple[int, int] | None = None
        self._graphs: tuple[int, int] | None = None
        self._device_tokens: int | None = None
        self._device: dict[str, list[DevicePool]] = {}
        self._host_gb: dict[str, dict[str, float]] = {}
        self._host_tokens: dict[str, int] = {}
        self._failure: FailureSeen | None = None
        self._swa: dict[str, tuple[int, int]] = {}
        self._swa_gib: dict[str, float] = {}
        self._headroom: MemoryHeadroom | None = None

    def add(self, event: Event) -> None:
        """Take the next event in log order."""
        match event:
            case PhaseStarted(phase=phase, at=at, stamped=stamped):
                if phase is Phase.INIT and (self._starts or self._failure is not None):
                    self._reset()  # a new start of the server: report on that one
                # A phase begun by an untimed line began at an unknown time: saying "when the
                # last timed line was" would charge, say, the silent pin to the warmup.
                self._starts.append((phase, at if stamped else None))
            case RankSeen(rank=rank):
                self._ranks.add(rank)
            case DialectDetected(dialect=dialect):
                self._dialect = dialect
            case ShardProgress(done=done, total=total):
                self._shards = (done, total)
            case GraphProgress(done=done, total=total):
                self._graphs = (done, total)
            case MaxTotalTokens(tokens=tokens):
                self._device_tokens = tokens
            case DevicePool(rank=rank):
                self._device.setdefault(rank or NO_RANK, []).append(event)
            case HostPool(rank=rank, pool=pool, gb=gb, tokens=tokens):
                # A rank can log several host allocations (by name): they are all RAM.
                self._host_gb.setdefault(rank or NO_RANK, {})[pool] = gb
                if tokens is not None and pool == KV_HOST_POOL:
                    self._host_tokens[rank or NO_RANK] = tokens
            case SlidingWindowSplit(rank=rank, full_tokens=full, swa_tokens=swa):
                self._swa[rank or NO_RANK] = (full, swa)
            case SlidingWindowPool(rank=rank, kv_gib=gib, full_tokens=full, swa_tokens=swa):
                self._swa.setdefault(rank or NO_RANK, (full, swa))
                self._swa_gib[rank or NO_RANK] = gib
            case MemoryHeadroom():
                if self._headroom is None:
                    self._headroom = event
            case FailureSeen():
                self._failure = event

    def build(self) -> StartupReport:
        """The report of the events taken so far."""
        failure = self._failure
        spans: list[PhaseSpan] = []
        for index, (phase, start) in enumerate(self._starts):
            if index + 1 < len(self._starts):
                end = self._starts[index + 1][1]
            elif phase is Phase.READY:
                end = start
            else:
                end = None if failure is None else failure.at
            spans.append(PhaseSpan(phase=phase, start=start, end=end))
        ready_at = next((s for p, s in self._starts if p is Phase.READY), None)
        ready = any(p is Phase.READY for p, _ in self._starts)
        ranks = tuple(sorted(self._ranks, key=rank_sort_key))
        if not ranks and (self._device or self._host_gb):
            ranks = (NO_RANK,)  # a single-process server logs no prefix: one rank, not none
        kinds = {
            r: classify_pools(pools, self._device_tokens or self._swa.get(r, (None,))[0])
            for r, pools in self._device.items()
        }
        target = {r: pool for r, (pool, _) in kinds.items() if pool is not None}
        undecided = next((why for _, (pool, why) in kinds.items() if pool is None), None)
        device_tokens = self._device_tokens
        if device_tokens is None and target:
            counts = [p.tokens for p in target.values() if p.tokens is not None]
            device_tokens = min(counts) if counts else None
        figures = self._figures(kinds, device_tokens)
        first = figures[min(figures, key=rank_sort_key)] if figures else ()
        kv_gib = {r: p.kv_gib for r, p in target.items()}
        host_kv = {
            r: pools[KV_HOST_POOL] for r, pools in self._host_gb.items() if KV_HOST_POOL in pools
        }
        extras = {
            r: {name: gb for name, gb in pools.items() if name != KV_HOST_POOL}
            for r, pools in self._host_gb.items()
        }
        return StartupReport(
            dialect=self._dialect,
            phases=tuple(spans),
            ranks=ranks,
            shards=self._shards,
            cuda_graphs=self._graphs,
            device_tokens=device_tokens,
            device_tokens_per_rank=_by_rank(
                {r: n for r, p in target.items() if (n := p.tokens or device_tokens) is not None}
            ),
            kv_gib_per_rank=_by_rank(kv_gib),
            host_gb_per_rank=_by_rank(host_kv),
            host_tokens_per_rank=_by_rank(self._host_tokens),
            pools=first,
            draft_pool=next((p for p in first if p.kind is PoolKind.DRAFT), None),
            device_pool_undecided=undecided,
            host_extra_gb_per_rank=_by_rank({r: e for r, e in extras.items() if e}),
            host_total_gb_per_rank=_by_rank(
                {r: round(sum(pools.values()), 2) for r, pools in self._host_gb.items()}
            ),
            sliding_window=self._sliding_window(),
            ready=ready,
            ready_at=ready_at,
            sglang_headroom=self._headroom,
            failure=None
            if failure is None
            else Failure(kind=failure.kind, lines=failure.lines, at=failure.at),
        )

    def _sliding_window(self) -> SlidingWindowFigures | None:
        """The first rank's sliding-window split, with each pool's logged GiB when known."""
        if not self._swa:
            return None
        rank = min(self._swa, key=rank_sort_key)
        full, swa = self._swa[rank]
        labelled = {(p.label or "").lower(): p.kv_gib for p in self._device.get(rank, [])}
        return SlidingWindowFigures(
            full_tokens=full,
            swa_tokens=swa,
            kv_gib=self._swa_gib.get(rank),
            full_kv_gib=labelled.get("full"),
            swa_kv_gib=labelled.get("swa"),
        )

    def _figures(
        self,
        kinds: dict[str, tuple[DevicePool | None, str | None]],
        device_tokens: int | None,
    ) -> dict[str, tuple[PoolFigures, ...]]:
        """Every rank's pools by kind, in log order."""
        out: dict[str, tuple[PoolFigures, ...]] = {}
        for rank, pools in self._device.items():
            target = kinds[rank][0]
            out[rank] = tuple(
                PoolFigures(
                    kind=pool_kind(pool, target),
                    tokens=pool.tokens if pool.tokens is not None else device_tokens,
                    kv_gib=pool.kv_gib,
                    label=pool.label,
                )
                for pool in pools
            )
        return out


def classify_pools(
    pools: list[DevicePool], max_total: int | None
) -> tuple[DevicePool | None, str | None]:
    """The target model's pool among one rank's pools, or ``None`` and why it cannot be told.

    SGLang's ``max_total_num_tokens`` is the target's token count: the first pool logged with it
    is the target's (a draft pool logged later can have the same count). Without that line yet,
    a single pool logged before graph capture is the target's; several are not decidable.
    """
    if max_total is not None:
        for pool in pools:
            if pool.tokens == max_total:
                return pool, None
    before = [pool for pool in pools if not pool.after_graphs]
    if len(before) == 1 or (before and all(pool.tokens is None for pool in before)):
        return before[0], None
    if not before:
        return None, "the log shows no device pool allocated before graph capture"
    counts = ", ".join(f"{pool.tokens:,}" for pool in before if pool.tokens is not None)
    named = "not logged yet" if max_total is None else f"{max_total:,}"
    return None, (
        f"{len(before)} device pools per rank ({counts} tokens) and max_total_num_tokens "
        f"{named}: which one is the target model's cannot be told"
    )


def pool_kind(pool: DevicePool, target: DevicePool | None) -> PoolKind:
    """``target`` for the target's pool, ``draft`` for one logged once graphs began, else
    ``other`` (a hybrid model's sliding-window pool)."""
    if pool is target:
        return PoolKind.TARGET
    return PoolKind.DRAFT if pool.after_graphs else PoolKind.OTHER


def _by_rank(values: dict[str, _V]) -> dict[str, _V]:
    return {rank: values[rank] for rank in sorted(values, key=rank_sort_key)}


def build_report(events: Iterable[Event]) -> StartupReport:
    """Fold a log's events (in log order) into the report of its last start."""
    builder = ReportBuilder()
    for event in events:
        builder.add(event)
    return builder.build()
