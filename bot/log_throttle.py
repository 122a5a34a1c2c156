"""One log line per kind of repeated event and interval, with the count of those left out.

A fault that repeats thousands of times a second (a full descriptor table makes every
``accept()`` fail, every poll of a log fail) must not turn the agent's log into the next
fault: the first occurrence is logged at once, the next ones at most once per ``interval_s``
with how many were left out since::

    throttle.warning("accept", "cannot accept connections: %s", exc)
    # ... WARNING cannot accept connections: [Errno 24] Too many open files
    # ... WARNING cannot accept connections: [Errno 24] Too many open files (41,233 more like it
    #     in the last 60 s)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LogThrottle"]


@dataclass
class _Seen:
    logged_at: float
    left_out: int = 0


class LogThrottle:
    """Rate-limits warnings by key; safe to call from any thread."""

    def __init__(
        self,
        log: logging.Logger,
        interval_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self.interval_s = interval_s
        self._monotonic = monotonic
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def warning(self, key: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless ``key`` was logged less than ``interval_s`` ago;
        whether it was logged."""
        now = self._monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.logged_at < self.interval_s:
                seen.left_out += 1
                return False
            self._seen[key] = _Seen(now)
        if seen is not None and seen.left_out:
            message += f" ({seen.left_out:,} more like it in the last {now - seen.logged_at:.0f} s)"
        self._log.warning(message, *args)
        return True
