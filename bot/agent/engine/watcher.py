"""One start, as the agent watches it: log text in, operation events (drafts) and figures out.

Pure: the caller reads the log and the clock and passes them in. The startup parser turns text
into typed events; this turns those into what a person follows::

    "[2026-02-24 11:20:02 TP0] KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB"
    -> Draft(phase=EventPhase.KV_POOL,
             message="KV pool: 159,274 device tokens, 10.42 GiB per rank", ...)

Every draft carries a ``step`` key ("shard:17", "phase:http") that names it uniquely within a
start: after an agent restart the log is read again from the start's beginning and the steps
already recorded are skipped, so no event is duplicated and none is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.agent.engine.progress import ProgressModel
from bot.planner import GiB, host_tokens_for_ratio
from bot.startup import (
    KV_HOST_POOL,
    DevicePool,
    FailureSeen,
    GraphProgress,
    HiCacheAutoSized,
    HostPool,
    MaxTotalTokens,
    Phase,
    PhaseStarted,
    ShardProgress,
    StartupParser,
    classify_pools,
)
from bot.vocab import EventPhase, FailureKind

__all__ = ["Draft", "StartFigures", "StartWatcher"]

# Pin progress is estimated, not logged: report it in tenths so a long pin still moves.
_PIN_STEPS = 10

_PHASE_TEXT = {
    Phase.INIT: "init: distributed setup",
    Phase.LOAD_WEIGHTS: "loading weights",
    Phase.KV_POOL: "allocating the device KV pool",
    Phase.CUDA_GRAPH: "capturing CUDA graphs",
    Phase.HOST_POOL: "allocating the HiCache host pool",
    Phase.HTTP: "HTTP server up",
    Phase.WARMUP: "warmup request",
}


@dataclass(frozen=True)
class Draft:
    """An event before it is numbered and stored."""

    phase: EventPhase
    message: str
    progress: float
    data: dict[str, Any]
    step: str
    # False for estimates (the pin): they do not count as the log moving (stall detection).
    from_log: bool = True


@dataclass
class StartFigures:
    """What the log told about the start so far."""

    device_tokens: int | None = None
    kv_gib_per_rank: float | None = None  # the target model's pool (never a draft's)
    draft_kv_gib: float | None = None  # a speculative-decoding draft model's pool beside it
    host_gb_per_rank: float | None = None  # the KV host pool
    host_extra_gb: dict[str, float] = field(default_factory=dict)  # other host pools by name
    host_pool_lines: list[str] = field(default_factory=list)  # each pool kind's first line
    host_tokens_per_rank: int | None = None
    phase: EventPhase = EventPhase.STARTING
    http_up: bool = False
    log_ready: bool = False
    failure_kind: FailureKind | None = None
    failure_lines: tuple[str, ...] = ()
    # The applied ratio (None for a size) and page size: with them the tokens are exact.
    ratio: float | None = None
    page_size: int = 1
    # The ratio 0.5.23's auto-sizing took (the least any rank logged), None when it did not run.
    auto_ratio: float | None = None

    @property
    def host_total_gb_per_rank(self) -> float | None:
        """All host RAM of one rank: the KV host pool and every extra pool (a DSA indexer)."""
        if self.host_gb_per_rank is None:
            return None
        return round(self.host_gb_per_rank + sum(self.host_extra_gb.values()), 2)

    @property
    def kv_bytes_per_token(self) -> float | None:
        if self.device_tokens and self.kv_gib_per_rank:
            return self.kv_gib_per_rank * GiB / self.device_tokens
        return None

    def host_tokens(self) -> int | None:
        """Tokens per rank: as logged (0.5.23); else, for a ratio, by SGLang's rule from the
        device pool (``int(device x ratio) // page + 1`` pages); else from the GB and the device
        pool's bytes per token (both logged rounded: close to, not exactly, SGLang's figure)."""
        if self.host_tokens_per_rank is not None:
            return self.host_tokens_per_rank
        if self.host_gb_per_rank is None:
            return None
        if self.ratio is not None and self.device_tokens:
            return host_tokens_for_ratio(self.device_tokens, self.ratio, self.page_size)
        per_token = self.kv_bytes_per_token
        if not per_token:
            return None
        return int(self.host_gb_per_rank * 1e9 // per_token)


class StartWatcher:
    """Follows one start's log text; ``ranks`` is the local rank count from the command line."""

    def __init__(
        self,
        progress: ProgressModel,
        ranks: int,
        ratio: float | None = None,
        page_size: int = 1,
    ) -> None:
        self.progress = progress
        self.ranks = ranks
        self.figures = StartFigures(ratio=ratio, page_size=max(1, page_size))
        self._parser = StartupParser()
        self._pin_started: float | None = None
        self._pin_step = 0
        self._graph_tenth = -1
        self._pools: list[DevicePool] = []  # the first rank's device pools, in log order

    def feed(self, text: str, now: float) -> list[Draft]:
        """Take new log text (``now`` = monotonic seconds); return the drafts it produced."""
        if not text:
            return []
        return self._events(self._parser.feed(text), now)

    def close(self, now: float) -> list[Draft]:
        """The log ended (the process died): flush its unfinished last line."""
        return self._events(self._parser.close(), now)

    def tick(self, now: float) -> list[Draft]:
        """Drafts that time alone produces: the silent pin's estimated progress."""
        if self._pin_started is None or self.figures.phase is not EventPhase.HOST_POOL:
            return []
        expected = self.progress.pin_seconds
        if expected <= 0:
            return []
        step = min(_PIN_STEPS - 1, int((now - self._pin_started) / expected * _PIN_STEPS))
        if step <= self._pin_step:
            return []
        self._pin_step = step
        fraction = step / _PIN_STEPS
        gb = self.figures.host_gb_per_rank or 0.0
        return [
            Draft(
                phase=EventPhase.HOST_POOL,
                message=f"pinning {gb:.2f} GB per rank: ~{fraction:.0%} (estimated)",
                progress=self.progress.at(EventPhase.HOST_POOL, 0.1 + 0.9 * fraction),
                data={"pin_fraction": fraction, "estimated": True},
                step=f"pin:{step}",
                from_log=False,
            )
        ]

    def _events(self, events: list[Any], now: float) -> list[Draft]:
        out: list[Draft] = []
        for event in events:
            draft = self._one(event, now)
            if draft is not None:
                out.append(draft)
        return out

    def _one(self, event: Any, now: float) -> Draft | None:
        figures = self.figures
        if isinstance(event, PhaseStarted):
            return self._phase(event, now)
        if isinstance(event, ShardProgress):
            return Draft(
                phase=EventPhase.LOAD_WEIGHTS,
                message=f"loading weights {event.done}/{event.total} shards",
                progress=self.progress.at(
                    EventPhase.LOAD_WEIGHTS, event.done / max(1, event.total)
                ),
                data={"shard": event.done, "shards": event.total},
                step=f"shard:{event.done}/{event.total}",
            )
        if isinstance(event, GraphProgress):
            # One bar step per batch size (52 on the field notes' host) in a few seconds: tenths
            # are enough for a person, and keep the event list readable.
            tenth = event.done * 10 // max(1, event.total)
            if event.done not in (0, event.total) and tenth == self._graph_tenth:
                return None
            self._graph_tenth = tenth
            return Draft(
                phase=EventPhase.CUDA_GRAPH,
                message=f"capturing CUDA graphs {event.done}/{event.total}",
                progress=self.progress.at(EventPhase.CUDA_GRAPH, event.done / max(1, event.total)),
                data={"graph": event.done, "graphs": event.total},
                step=f"graph:{event.done}/{event.total}",
            )
        if isinstance(event, MaxTotalTokens):
            figures.device_tokens = event.tokens
            self._target_pool()
            return None
        if isinstance(event, DevicePool):
            return self._device_pool(event)
        if isinstance(event, HostPool):
            return self._host_pool(event, now)
        if isinstance(event, HiCacheAutoSized):
            least = figures.auto_ratio
            figures.auto_ratio = event.ratio if least is None else min(least, event.ratio)
            return None
        if isinstance(event, FailureSeen):
            figures.failure_kind = FailureKind(event.kind.value)
            figures.failure_lines = event.lines
        return None

    def _device_pool(self, event: DevicePool) -> Draft | None:
        """Keep the first rank's pools; the target's figures are the device pool's, a pool
        logged once graphs began is a draft model's, reported beside it."""
        figures = self.figures
        if self._pools and event.rank != self._pools[0].rank:
            return None
        self._pools.append(event)
        first = figures.kv_gib_per_rank is None
        if event.after_graphs:
            figures.draft_kv_gib = event.kv_gib
            return Draft(
                phase=EventPhase.KV_POOL,
                message=f"draft model's KV pool: {event.kv_gib:.2f} GiB per rank (beside the "
                "device pool, not counted in it)",
                progress=self.progress.at(EventPhase.CUDA_GRAPH, 1.0),
                data={"draft_kv_gib": event.kv_gib},
                step="kv_pool:draft",
            )
        self._target_pool()
        if not first or figures.kv_gib_per_rank is None:
            return None
        tokens = event.tokens if event.tokens is not None else figures.device_tokens
        token_text = "" if tokens is None else f"{tokens:,} device tokens, "
        return Draft(
            phase=EventPhase.KV_POOL,
            message=f"KV pool: {token_text}{event.kv_gib:.2f} GiB per rank",
            progress=self.progress.at(EventPhase.KV_POOL, 0.5),
            data={"device_tokens": tokens, "kv_gib": event.kv_gib},
            step="kv_pool:figures",
        )

    def _target_pool(self) -> None:
        target, _ = classify_pools(self._pools, self.figures.device_tokens)
        if target is not None:
            self.figures.kv_gib_per_rank = target.kv_gib
            if self.figures.device_tokens is None:
                self.figures.device_tokens = target.tokens

    def _phase(self, event: PhaseStarted, now: float) -> Draft | None:
        figures = self.figures
        if event.phase is Phase.READY:
            figures.log_ready = True
            return None
        figures.phase = EventPhase(event.phase.value)
        if event.phase is Phase.HTTP:
            figures.http_up = True
        if event.phase is Phase.HOST_POOL:
            self._pin_started = now
        return Draft(
            phase=figures.phase,
            message=_PHASE_TEXT[event.phase],
            progress=self.progress.at(figures.phase, 0.0),
            data={"rank": event.rank} if event.rank else {},
            step=f"phase:{event.phase.value}",
        )

    def _host_pool(self, event: HostPool, now: float) -> Draft | None:
        figures = self.figures
        if event.pool != KV_HOST_POOL:
            return self._host_extra(event)
        first = figures.host_gb_per_rank is None
        if first:
            figures.host_pool_lines.append(event.line)
        figures.host_gb_per_rank = event.gb
        if event.tokens is not None:
            figures.host_tokens_per_rank = event.tokens
        if not first:
            return None
        self.progress.host_gb_per_rank = event.gb
        self._pin_started = now
        total = event.gb * self.ranks
        pin = self.progress.pin_seconds
        tokens = figures.host_tokens()
        token_text = f" ({tokens:,} tokens)" if tokens is not None else ""
        return Draft(
            phase=EventPhase.HOST_POOL,
            message=(
                f"host pool: {event.gb:.2f} GB per rank{token_text} x {self.ranks} ranks = "
                f"{total:.1f} GB; pinning, silent for ~{pin:.0f} s at the usual rate"
            ),
            progress=self.progress.at(EventPhase.HOST_POOL, 0.1),
            data={
                "host_gb_per_rank": event.gb,
                "host_tokens_per_rank": tokens,
                "ranks": self.ranks,
                "host_gb_total": round(total, 2),
                "pin_estimate_s": round(pin, 1),
            },
            step="host_pool:figures",
        )

    def _host_extra(self, event: HostPool) -> Draft | None:
        """Another host allocation (a DSA indexer's): RAM too, so the total grows."""
        figures = self.figures
        if event.pool in figures.host_extra_gb:
            return None
        figures.host_extra_gb[event.pool] = event.gb
        figures.host_pool_lines.append(event.line)
        total = figures.host_total_gb_per_rank or event.gb
        self.progress.host_gb_per_rank = total
        return Draft(
            phase=EventPhase.HOST_POOL,
            message=(
                f"host pool for {event.pool}: {event.gb:.2f} GB per rank; all host pools "
                f"{total:.2f} GB per rank x {self.ranks} ranks = {total * self.ranks:.1f} GB"
            ),
            progress=self.progress.at(EventPhase.HOST_POOL, 0.1),
            data={
                "host_extra_gb_per_rank": dict(figures.host_extra_gb),
                "host_total_gb_per_rank": total,
                "host_gb_total": round(total * self.ranks, 2),
            },
            step=f"host_pool:{event.pool}",
        )
