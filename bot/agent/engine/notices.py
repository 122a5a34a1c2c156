"""What the engine knows is wrong now, for ``/v1/status``'s ``problems``: the log not followable
by its name, the state directory refusing writes. Each part sets its line under its own key and
clears it when the cause is gone; status lists the lines in the order they were first set::

    notices.set(NoticeKey.LOG, "the server log /srv/server.log was moved or deleted; ...")
    notices.lines()  ->  ("the server log /srv/server.log was moved or deleted; ...",)
    notices.set(NoticeKey.LOG, None)
    notices.lines()  ->  ()
"""

from __future__ import annotations

import threading
from enum import StrEnum

__all__ = ["NoticeKey", "Notices"]


class NoticeKey(StrEnum):
    """Who set a notice: one line each."""

    LOG = "log"  # the server's log (the follower)
    STATE = "state"  # the agent's state directory (an operation could not record)


class Notices:
    """Thread-safe: operation threads set, the HTTP layer reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: dict[NoticeKey, str] = {}

    def set(self, key: NoticeKey, line: str | None) -> None:
        """Set ``key``'s line, or clear it with None."""
        with self._lock:
            if line is None:
                self._lines.pop(key, None)
            else:
                self._lines[key] = line

    def lines(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._lines.values())
