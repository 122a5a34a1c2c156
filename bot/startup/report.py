"""The report of one start, folded from the parser's events: timeline, figures, failure.

``build_report(events)`` takes the events of a whole log; ``ReportBuilder`` takes them one at a
time (the file reader uses it so memory stays flat however long the log is). When the log holds
several starts (a restart, a rollback), the report is about the last one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from bot.startup.events import (
    DevicePool,
    Dialect,
    DialectDetected,
    Event,
    FailureKind,
    FailureSeen,
    GraphProgress,
    HostPool,
    MaxTotalTokens,
    Phase,
    PhaseStarted,
    RankSeen,
    ShardProgress,
)

__all__ = ["Failure", "PhaseSpan", "ReportBuilder", "StartupReport", "build_report"]

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
class StartupReport:
    """Everything one start's log says: what a person or the agent wants to know about it.

    Per-rank mappings are keyed by the rank prefix (``"TP3"``), or ``""`` for lines without one.
    ``device_tokens`` is ``max_total_num_tokens`` (the device pool, never device + host).
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
        """Host pool GB (1e9 bytes) summed over the ranks that logged one."""
        return round(sum(self.host_gb_per_rank.values()), 2)

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
            "host_gb_total": self.host_gb_total,
            "host_tokens_per_rank": dict(self.host_tokens_per_rank),
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
        self._device: dict[str, DevicePool] = {}
        self._host_gb: dict[str, dict[str | None, float]] = {}
        self._host_tokens: dict[str, dict[str | None, int]] = {}
        self._failure: FailureSeen | None = None

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
                self._device[rank or NO_RANK] = event
            case HostPool(rank=rank, pool=pool, gb=gb, tokens=tokens):
                # 0.5.23 can log more than one pool per rank (by name): they add up.
                self._host_gb.setdefault(rank or NO_RANK, {})[pool] = gb
                if tokens is not None:
                    self._host_tokens.setdefault(rank or NO_RANK, {})[pool] = tokens
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
        device_tokens = self._device_tokens
        if device_tokens is None and self._device:
            device_tokens = min(pool.tokens for pool in self._device.values())
        return StartupReport(
            dialect=self._dialect,
            phases=tuple(spans),
            ranks=ranks,
            shards=self._shards,
            cuda_graphs=self._graphs,
            device_tokens=device_tokens,
            device_tokens_per_rank=_by_rank({r: p.tokens for r, p in self._device.items()}),
            kv_gib_per_rank=_by_rank({r: p.kv_gib for r, p in self._device.items()}),
            host_gb_per_rank=_by_rank(
                {r: round(sum(pools.values()), 2) for r, pools in self._host_gb.items()}
            ),
            host_tokens_per_rank=_by_rank(
                {r: _pool_tokens(pools) for r, pools in self._host_tokens.items()}
            ),
            ready=ready,
            ready_at=ready_at,
            failure=None
            if failure is None
            else Failure(kind=failure.kind, lines=failure.lines, at=failure.at),
        )


def _pool_tokens(pools: dict[str | None, int]) -> int:
    # The tokens a host pool holds are those of its KV pool; other pools store the same tokens.
    return pools.get("kv", next(iter(pools.values())))


def _by_rank(values: dict[str, _V]) -> dict[str, _V]:
    return {rank: values[rank] for rank in sorted(values, key=rank_sort_key)}


def build_report(events: Iterable[Event]) -> StartupReport:
    """Fold a log's events (in log order) into the report of its last start."""
    builder = ReportBuilder()
    for event in events:
        builder.add(event)
    return builder.build()
