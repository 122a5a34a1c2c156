"""Whether a host's samples call for another host pool, and which settings to put to the planner.

Pure: the samples and the rules in, an :class:`Assessment` and :class:`Candidate` settings out.
:mod:`bot.reports.runtime.advice` puts the candidates to the planner (through the agent, on live
facts) and keeps the first it accepts, so a recommendation is never one the planner refuses::

    usage 0.97, 0.98, 0.96 over the last 30 min, 80 queued on average, ratio 2
    -> Assessment(Need.GROW, "token usage 96-98% ...") and candidates ratio 16, 12, ... 3
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from bot.hicache import HiCacheSetting
from bot.reports.settings import RecommendRules
from bot.store.records import CapacitySample

__all__ = ["RATIO_LADDER", "Assessment", "Candidate", "Need", "assess", "candidates"]

#: The ratios a recommendation chooses from: round numbers people type, as in the field notes.
RATIO_LADDER: tuple[float, ...] = (1.5, 2, 3, 4, 5, 6, 8, 10, 12, 16)


class Need(StrEnum):
    GROW = "grow"  # the device pool is full and requests wait: more host pool
    SHRINK = "shrink"  # the host pool sits unused while the host runs short of RAM


@dataclass(frozen=True)
class Assessment:
    need: Need
    evidence: str  # the figures that called for it, one sentence


@dataclass(frozen=True)
class Candidate:
    """A setting to put to the planner: a ratio or a size (GB per rank), never both."""

    ratio: float | None = None
    size_gb: int | None = None

    @property
    def command(self) -> str:
        """The chat command that proposes it."""
        if self.size_gb is not None:
            return f"resize size {self.size_gb}"
        return f"resize ratio {self.ratio:g}"


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _grow(samples: Sequence[CapacitySample], rules: RecommendRules) -> Assessment | None:
    usage = [s.token_usage for s in samples if s.token_usage is not None]
    queued = [s.queued_requests for s in samples if s.queued_requests is not None]
    if len(usage) < rules.min_samples or len(queued) < rules.min_samples:
        return None
    low, high = min(usage), max(usage)
    mean_queue = sum(queued) / len(queued)
    if low < rules.high_usage or mean_queue < rules.min_queue:
        return None
    return Assessment(
        Need.GROW,
        f"token usage {_pct(low)}-{_pct(high)} over the last {rules.sustained_minutes} min "
        f"({len(usage)} samples) with {mean_queue:.0f} requests queued on average",
    )


def _shrink(samples: Sequence[CapacitySample], rules: RecommendRules) -> Assessment | None:
    usage = [s.token_usage for s in samples if s.token_usage is not None]
    if len(usage) < rules.min_samples:
        return None
    peak = max(usage)
    last = samples[-1]
    if last.ram_total_bytes is None or last.ram_available_bytes is None or not last.ram_total_bytes:
        return None
    free = last.ram_available_bytes / last.ram_total_bytes
    if peak >= rules.low_usage or free >= rules.ram_tight_fraction:
        return None
    return Assessment(
        Need.SHRINK,
        f"token usage never above {_pct(peak)} in {len(usage)} samples, so the host pool "
        f"was barely used, while only {_pct(free)} of host RAM "
        f"({last.ram_available_bytes / 1e9:.0f} GB) is available",
    )


def assess(
    samples: Sequence[CapacitySample], now: datetime, rules: RecommendRules
) -> Assessment | None:
    """A need the samples (oldest first, one host) show, or None when nothing is wrong."""
    if not samples:
        return None
    recent = [s for s in samples if s.at >= now - timedelta(minutes=rules.sustained_minutes)]
    # A sample without /metrics figures is no evidence either way: it is left out, and what
    # remains must still be min_samples.
    return _grow(recent, rules) or _shrink(samples, rules)


def candidates(current: HiCacheSetting | None, need: Need) -> tuple[Candidate, ...]:
    """Settings to try, best first: for growth the largest first (the planner keeps the largest
    that fits), for shrinking about half the current pool first. None with HiCache off."""
    if current is None or not current.enabled:
        return ()
    effective = current.effective()
    if effective.size_gb is not None:
        size = effective.size_gb
        sizes: tuple[int, ...] = (size * 4, size * 3, size * 2, size * 3 // 2)
        if need is Need.SHRINK:
            sizes = (size // 2, size * 3 // 4)
        wanted = [s for s in sizes if s > 0 and (s > size) == (need is Need.GROW) and s != size]
        return tuple(Candidate(size_gb=s) for s in dict.fromkeys(wanted))
    ratio = float(effective.ratio or 0)
    if need is Need.GROW:
        return tuple(Candidate(ratio=r) for r in sorted(RATIO_LADDER, reverse=True) if r > ratio)
    halves = sorted((r for r in RATIO_LADDER if r <= ratio / 2), reverse=True)
    nearer = sorted(r for r in RATIO_LADDER if ratio / 2 < r < ratio)
    return tuple(Candidate(ratio=r) for r in (*halves, *nearer))
