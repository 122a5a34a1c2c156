"""The one JSON line every bench prints: its figures, each target beside its measurement, and
the machine's load average when the bench began and ended (2 shared cores make the figures
move with the load, so the load is kept with them).

    line = BenchLine("guard")
    line.figures["runs"] = 10
    line.check("allocating line -> tree gone, median", 212.0, below=1000, unit="ms")
    line.emit()   # {"bench": "guard", "runs": 10, "targets": [...], "met": true, "load": {...}}

Each target is ``{"figure", "measured", "target", "met"}``; ``target`` reads as a person would
write it ("< 1000 ms"); the line's ``met`` is true only when every target is. A figure that has
no target of its own is a plain figure, never a target that cannot fail.

Scripts in ``bench/`` starting with ``_`` are helpers: ``make bench`` and the smoke test skip them.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BenchLine", "median", "percentile"]


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``values``: the smallest value with at
    least ``q`` of them at or below it (so p99 of 200 values is the 198th)."""
    if not values:
        raise ValueError("no values to take a percentile of: the bench measured nothing")
    if not 0 < q <= 1:
        raise ValueError(f"quantile {q} is not in (0, 1]")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 1))  # ceil(n * q), at least the first
    return ordered[int(rank) - 1]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@dataclass
class BenchLine:
    """One bench's output, filled as it runs; :meth:`emit` prints it."""

    bench: str
    figures: dict[str, Any] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)
    load_at_start: list[float] = field(default_factory=_load)

    def check(
        self,
        figure: str,
        measured: float,
        *,
        below: float | None = None,
        at_most: float | None = None,
        at_least: float | None = None,
        unit: str = "",
    ) -> bool:
        """Record ``measured`` against one bound (``below``: measured < bound; ``at_most``:
        measured <= bound, as "within 2x"; ``at_least``: measured >= bound); returns whether it
        was met."""
        bounds = {"<": below, "<=": at_most, ">=": at_least}
        given = [(sign, bound) for sign, bound in bounds.items() if bound is not None]
        if len(given) != 1:
            raise ValueError(f"{figure}: give exactly one of below=, at_most= or at_least=")
        sign, bound = given[0]
        met = {"<": measured < bound, "<=": measured <= bound, ">=": measured >= bound}[sign]
        target = f"{sign} {bound:g}" + (f" {unit}" if unit else "")
        self.targets.append(
            {"figure": figure, "measured": round(measured, 3), "target": target, "met": met}
        )
        return met

    def emit(self) -> None:
        """Print the line (the only thing a bench writes to stdout)."""
        line = {
            "bench": self.bench,
            **self.figures,
            "targets": self.targets,
            "met": all(t["met"] for t in self.targets) if self.targets else None,
            "load": {"start": self.load_at_start, "end": _load()},
        }
        print(json.dumps(line), flush=True)


def median(values: Sequence[float]) -> float:
    """The median, refusing an empty run with a clear message."""
    if not values:
        raise ValueError("no values to take a median of: the bench measured nothing")
    return float(statistics.median(values))
