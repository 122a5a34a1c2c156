"""Expected startup time of a host, from its earlier starts, scaled for the host pool size.

A start is the model's fixed cost (weights, KV pool, CUDA graphs, warmup) plus the silent pin of
the host pool, which grows with the pool: about 60 s per 100-120 GB per rank upstream (#31600,
#31746). With starts at two or more pool sizes the host's own rate is fitted; otherwise that
default rate is used around the host's median fixed cost.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Seconds of pinning per GB (1e9) of host pool per rank: 60 s per ~110 GB.
DEFAULT_PIN_SECONDS_PER_GB = 60 / 110


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
    sizes = {round(s.host_gb_per_rank, 1) for s in samples}
    if len(sizes) < 2:
        return DEFAULT_PIN_SECONDS_PER_GB
    mean_x = statistics.fmean(s.host_gb_per_rank for s in samples)
    mean_y = statistics.fmean(s.seconds for s in samples)
    sxx = sum((s.host_gb_per_rank - mean_x) ** 2 for s in samples)
    sxy = sum((s.host_gb_per_rank - mean_x) * (s.seconds - mean_y) for s in samples)
    slope = sxy / sxx
    # Noise can fit a negative or absurd slope; a pin never speeds a start up.
    return slope if slope > 0 else DEFAULT_PIN_SECONDS_PER_GB
