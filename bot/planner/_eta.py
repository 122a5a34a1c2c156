"""Expected startup time of a host, from its earlier starts, scaled for the host pool size.

A start is the model's fixed cost (weights, KV pool, CUDA graphs, warmup) plus the silent pin of
the host pool, which grows with the pool: about 60 s per 100-120 GB per rank upstream
(docs/sglang.md, Host pool sizing). With starts at pool sizes at least 10 GB apart the host's own
rate is fitted (unless the fit is implausible); otherwise that default rate is used around the
host's median fixed cost.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Seconds of pinning per GB (1e9) of host pool per rank: 60 s per ~110 GB.
DEFAULT_PIN_SECONDS_PER_GB = 60 / 110
# Pool sizes (GB per rank) must span at least this much before the host's own rate is fitted.
MIN_FIT_SPAN_GB = 10.0


@dataclass(frozen=True)
class StartSample:
    """One earlier start that became ready: how long it took, and its host pool per rank."""

    seconds: float
    host_gb_per_rank: float


def estimate_startup_seconds(
    history: Sequence[StartSample], host_gb_per_rank: float
) -> float | None:
    """Seconds a start with ``host_gb_per_rank`` should take on this host; None without history.

    >>> estimate_startup_seconds([StartSample(600, 0), StartSample(720, 220)], 110)
    660.0
    """
    samples = [s for s in history if s.seconds > 0]
    if not samples:
        return None
    rate = _fitted_rate(samples)
    fixed = statistics.median(s.seconds - rate * s.host_gb_per_rank for s in samples)
    return max(0.0, fixed) + rate * host_gb_per_rank


def _fitted_rate(samples: Sequence[StartSample]) -> float:
    sizes = [s.host_gb_per_rank for s in samples]
    if max(sizes) - min(sizes) < MIN_FIT_SPAN_GB:
        # Starts at (nearly) one size say nothing about the pin: their spread is noise, and a
        # slope fitted to it can predict hours.
        return DEFAULT_PIN_SECONDS_PER_GB
    mean_x = statistics.fmean(sizes)
    mean_y = statistics.fmean(s.seconds for s in samples)
    sxx = sum((x - mean_x) ** 2 for x in sizes)
    sxy = sum((s.host_gb_per_rank - mean_x) * (s.seconds - mean_y) for s in samples)
    slope = sxy / sxx
    # A pin never speeds a start up, and a start never takes negative time without one.
    if slope <= 0 or mean_y - slope * mean_x < 0:
        return DEFAULT_PIN_SECONDS_PER_GB
    return slope
