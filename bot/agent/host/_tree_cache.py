"""A process tree's members, kept for a short while.

Finding the members of a server's tree scans every process of the host (psutil's
``children(recursive=True)`` reads the parent of each ``/proc/<pid>``: 14 ms and 5 ms of CPU
per call on a machine running a few hundred processes), and ``/v1/status`` and every plan ask for
the tree's resident memory. The members of an SGLang server's tree change when it starts or
stops, not between two status calls, so they are kept for ``ttl_s`` per root pid; the memory of
each member is still read on every call. A child born within ``ttl_s`` of a scan is counted from
the next scan on: the held RAM is then under-counted for at most ``ttl_s``, which a plan reads as
less RAM released by the restart (a stricter budget, never a looser one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["TREE_TTL_S", "TreeMembers"]

#: How long a scan of a tree's members is used again.
TREE_TTL_S = 2.0


class TreeMembers:
    """``members(pid)``: ``scan(pid)`` (the pid and its alive descendants), reused for ``ttl_s``
    of ``monotonic`` seconds for the same root pid. Thread-safe."""

    def __init__(
        self,
        scan: Callable[[int], set[int]],
        monotonic: Callable[[], float],
        ttl_s: float = TREE_TTL_S,
    ) -> None:
        self._scan = scan
        self._monotonic = monotonic
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._kept: tuple[int, float, frozenset[int]] | None = None  # root, scanned at, members

    def members(self, pid: int) -> frozenset[int]:
        now = self._monotonic()
        with self._lock:
            kept = self._kept
        if kept is not None and kept[0] == pid and 0 <= now - kept[1] < self._ttl_s:
            return kept[2]
        found = frozenset(self._scan(pid))
        with self._lock:
            self._kept = (pid, now, found)
        return found
