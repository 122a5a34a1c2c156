"""Requests in flight on the simulated server's ``/generate``, per DP rank, and the drain.

``GET /get_load`` answers SGLang's shape, one object per DP rank (the router's own mock worker
in sgl-router's tests answers the same)::

    [{"dp_rank": 0, "num_reqs": 2, "num_waiting_reqs": 0, "num_tokens": 14}]

A request is placed on the rank with the fewest requests, as SGLang's data-parallel controller
does with its shortest-queue policy; it holds its prompt and output tokens until it finishes.
Once SIGTERM arrives the server stops accepting (``/generate`` answers 503) and waits for
``in_flight()`` to reach zero, as SGLang's graceful exit does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["InFlight", "RankLoad"]


@dataclass(frozen=True)
class RankLoad:
    """One DP rank's entry of ``/get_load``."""

    dp_rank: int
    num_reqs: int
    num_waiting_reqs: int
    num_tokens: int

    def to_json(self) -> dict[str, int]:
        return {
            "dp_rank": self.dp_rank,
            "num_reqs": self.num_reqs,
            "num_waiting_reqs": self.num_waiting_reqs,
            "num_tokens": self.num_tokens,
        }


@dataclass
class InFlight:
    """Thread-safe counts of the ``/generate`` requests running on each of ``dp_size`` ranks."""

    dp_size: int
    accepting: bool = True
    _reqs: list[int] = field(default_factory=list)
    _tokens: list[int] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        self._reqs = [0] * self.dp_size
        self._tokens = [0] * self.dp_size

    def begin(self, tokens: int) -> int | None:
        """Admit a request holding ``tokens``; its rank, or None once draining (a 503)."""
        with self._changed:
            if not self.accepting:
                return None
            rank = min(range(self.dp_size), key=lambda r: self._reqs[r])
            self._reqs[rank] += 1
            self._tokens[rank] += tokens
            self._changed.notify_all()
            return rank

    def end(self, rank: int, tokens: int) -> None:
        with self._changed:
            self._reqs[rank] -= 1
            self._tokens[rank] -= tokens
            self._changed.notify_all()

    def stop_accepting(self) -> None:
        with self._changed:
            self.accepting = False
            self._changed.notify_all()

    def in_flight(self) -> int:
        with self._changed:
            return sum(self._reqs)

    def wait_idle(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every request to finish; the number still running."""
        with self._changed:
            self._changed.wait_for(lambda: sum(self._reqs) == 0, timeout=timeout_s)
            return sum(self._reqs)

    def loads(self, extra_running: int = 0, extra_waiting: int = 0) -> list[RankLoad]:
        """``/get_load``'s ranks; the synthetic load (``KIMI_SIM_LOAD``) counts on rank 0."""
        with self._changed:
            return [
                RankLoad(
                    dp_rank=rank,
                    num_reqs=self._reqs[rank] + (extra_running if rank == 0 else 0),
                    num_waiting_reqs=extra_waiting if rank == 0 else 0,
                    num_tokens=self._tokens[rank],
                )
                for rank in range(self.dp_size)
            ]
