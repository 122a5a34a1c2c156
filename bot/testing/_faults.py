"""Injected failures: answer a method with 429 or 500 for a share of calls, or the next N.

The share is drawn from a ``random.Random`` seeded per rule, so a run with the same seed and the
same sequence of calls to a method fails the same calls again. Several statuses may share one
method's calls (a third 429, a tenth 500): one draw per call picks which, if any.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from bot.errors import InputError

__all__ = ["Fault", "FaultPlan"]

_STATUSES = (429, 500, 503)


@dataclass(frozen=True)
class Fault:
    """The failure to answer with: an HTTP status and, for 429, the ``Retry-After`` seconds."""

    status: int
    retry_after: int


@dataclass
class _ShareRule:
    bands: tuple[tuple[float, Fault], ...]  # (upper bound of the draw, its fault), increasing
    rng: random.Random


def _checked_fault(status: int, retry_after: int) -> Fault:
    if status not in _STATUSES:
        raise InputError(
            f"fault status {status} is not one Slack answers with; use 429, 500 or 503"
        )
    if retry_after < 0:
        raise InputError(f"Retry-After {retry_after} is negative; use 0 or more seconds")
    return Fault(status=status, retry_after=retry_after)


class FaultPlan:
    """Which calls to which methods fail; thread-safe, consulted once per call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[str, list[Fault]] = {}
        self._shares: dict[str, _ShareRule] = {}

    def fail_next(
        self, method: str, count: int, *, status: int = 429, retry_after: int = 1
    ) -> None:
        """Fail the next ``count`` calls to ``method``, before any share rule is drawn."""
        if count < 1:
            raise InputError(f"fault count {count} is not positive; fail at least 1 call")
        fault = _checked_fault(status, retry_after)
        with self._lock:
            self._next.setdefault(method, []).extend([fault] * count)

    def fail_share(
        self, method: str, share: float, *, status: int = 429, retry_after: int = 1, seed: int = 0
    ) -> None:
        """Fail about ``share`` (0 to 1) of the calls to ``method``, drawn with ``seed``."""
        self.fail_shares(method, {status: share}, retry_after=retry_after, seed=seed)

    def fail_shares(
        self, method: str, shares: Mapping[int, float], *, retry_after: int = 1, seed: int = 0
    ) -> None:
        """Fail about ``shares[status]`` of the calls to ``method`` with each status (e.g.
        ``{429: 1/3, 500: 1/10}``), one draw per call with ``seed``; replaces earlier shares."""
        bands: list[tuple[float, Fault]] = []
        bound = 0.0
        for status, share in shares.items():
            if not 0.0 <= share <= 1.0:
                raise InputError(
                    f"fault share {share} is not between 0 and 1 (e.g. 0.33 for a third)"
                )
            bound += share
            bands.append((bound, _checked_fault(status, retry_after)))
        if bound > 1.0:
            raise InputError(f"fault shares add up to {bound:g}, more than every call (1)")
        with self._lock:
            self._shares[method] = _ShareRule(tuple(bands), random.Random(seed))

    def clear(self) -> None:
        """Stop failing anything."""
        with self._lock:
            self._next.clear()
            self._shares.clear()

    def draw(self, method: str) -> Fault | None:
        """The fault for this call to ``method``, or None to answer it normally."""
        with self._lock:
            pending = self._next.get(method)
            if pending:
                return pending.pop(0)
            rule = self._shares.get(method)
            if rule is None:
                return None
            # Draw for every call, failing or not, so the sequence depends only on the seed.
            drawn = rule.rng.random()
            return next((fault for bound, fault in rule.bands if drawn < bound), None)
