"""How far a start has got, as one number 0..1, and how long it should still take.

Each phase of a start weighs what it typically lasts on the field notes' host (Kimi-K2.5, TP 8,
docs/sglang.md, startup phases: about ten minutes, eight of them loading weights),
and the host pool's silent pin weighs its estimated length: GB per rank x the pin rate (about
60 s per 100-120 GB per rank, #31600). So ``load_weights`` at shard 32/64 reads::

    (starting 5 + init 26 + 240) / (5 + 26 + 480 + 6 + 14 + 2 + pin + 3 + 6 + 1)  ~ 0.50 (no pool)

Progress never goes back within a start, whatever the log does.
"""

from __future__ import annotations

from bot.planner import DEFAULT_PIN_SECONDS_PER_GB
from bot.vocab import EventPhase

__all__ = ["START_PHASES", "ProgressModel", "eta_seconds"]

#: The phases of one start the progress bar spans, in order, with their typical seconds.
_TYPICAL_S: tuple[tuple[EventPhase, float], ...] = (
    (EventPhase.STARTING, 5.0),
    (EventPhase.INIT, 26.0),
    (EventPhase.LOAD_WEIGHTS, 480.0),
    (EventPhase.KV_POOL, 6.0),
    (EventPhase.CUDA_GRAPH, 14.0),
    (EventPhase.HOST_POOL, 2.0),  # plus the pin, added per start
    (EventPhase.HTTP, 3.0),
    (EventPhase.WARMUP, 6.0),
    (EventPhase.VERIFYING, 1.0),
)
START_PHASES: tuple[EventPhase, ...] = tuple(name for name, _ in _TYPICAL_S)
_INDEX = {name: index for index, name in enumerate(START_PHASES)}


class ProgressModel:
    """Progress of one start; ``host_gb_per_rank`` (expected, later as logged) sizes the pin."""

    def __init__(
        self,
        host_gb_per_rank: float | None = None,
        pin_seconds_per_gb: float = DEFAULT_PIN_SECONDS_PER_GB,
    ) -> None:
        self.pin_seconds_per_gb = pin_seconds_per_gb
        self.host_gb_per_rank = host_gb_per_rank or 0.0
        self._last = 0.0

    @property
    def pin_seconds(self) -> float:
        """The silent pin's expected length at the typical (real-time) rate."""
        return self.host_gb_per_rank * self.pin_seconds_per_gb

    def _weights(self) -> list[float]:
        weights = [seconds for _, seconds in _TYPICAL_S]
        weights[_INDEX[EventPhase.HOST_POOL]] += self.pin_seconds
        return weights

    def at(self, phase: EventPhase, fraction: float = 0.0) -> float:
        """Progress at ``fraction`` (0..1) through ``phase``; never less than before.

        A phase outside the start (stopping, waiting_gpus) keeps the last value; ``ready`` is 1.
        """
        if phase == EventPhase.READY:
            self._last = 1.0
            return 1.0
        index = _INDEX.get(phase)
        if index is None:
            return round(self._last, 4)
        weights = self._weights()
        done = sum(weights[:index]) + weights[index] * min(1.0, max(0.0, fraction))
        # Below 1 until ready is verified: a bar at 100% must mean ready.
        value = min(0.99, done / sum(weights))
        self._last = max(self._last, value)
        return round(self._last, 4)

    @property
    def last(self) -> float:
        return self._last


def eta_seconds(elapsed_s: float, progress: float, expected_total_s: float | None) -> float | None:
    """Seconds left: from this host's expected startup time while within it, else extrapolated
    from the progress so far (None before there is anything to go on)."""
    if expected_total_s is not None and elapsed_s < expected_total_s:
        return round(expected_total_s - elapsed_s, 1)
    if progress >= 0.05 and elapsed_s > 0:
        return round(elapsed_s * (1.0 - progress) / progress, 1)
    return None
