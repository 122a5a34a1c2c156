"""The stand-in's copy of each channel: messages by ``ts``, their current text and blocks.

Slack's ``ts`` is a Unix time with six decimals, unique within a channel and increasing, e.g.
``"1767000000.000100"``; the stand-in counts up from that value per channel so tests can compare
timestamps as Slack clients do (as strings of equal length, or as decimals).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["ChannelStore", "StoredMessage"]

_FIRST_SECOND = 1_767_000_000
_TS_STEP = 100  # microseconds between two messages of one channel


@dataclass(frozen=True)
class StoredMessage:
    """A message as it reads now, after every ``chat.update`` it received."""

    channel: str
    ts: str
    text: str
    blocks: tuple[Any, ...]
    thread_ts: str | None
    edits: int = 0
    files: tuple[str, ...] = ()


class ChannelStore:
    """Messages per channel; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: dict[str, dict[str, StoredMessage]] = {}
        self._counters: dict[str, int] = {}

    def post(
        self,
        channel: str,
        text: str,
        blocks: list[Any] | None,
        thread_ts: str | None,
        files: tuple[str, ...] = (),
    ) -> StoredMessage:
        """Store a new message in ``channel`` under the next ``ts``."""
        with self._lock:
            count = self._counters.get(channel, 0) + 1
            self._counters[channel] = count
            micros = count * _TS_STEP
            ts = f"{_FIRST_SECOND + micros // 1_000_000}.{micros % 1_000_000:06d}"
            message = StoredMessage(
                channel=channel,
                ts=ts,
                text=text,
                blocks=tuple(blocks or ()),
                thread_ts=thread_ts,
                files=files,
            )
            self._messages.setdefault(channel, {})[ts] = message
            return message

    def update(
        self, channel: str, ts: str, text: str | None, blocks: list[Any] | None
    ) -> StoredMessage | None:
        """Replace the text and/or blocks of an existing message; None if there is no such ts."""
        with self._lock:
            current = self._messages.get(channel, {}).get(ts)
            if current is None:
                return None
            updated = replace(
                current,
                text=current.text if text is None else text,
                blocks=current.blocks if blocks is None else tuple(blocks),
                edits=current.edits + 1,
            )
            self._messages[channel][ts] = updated
            return updated

    def message(self, channel: str, ts: str) -> StoredMessage | None:
        with self._lock:
            return self._messages.get(channel, {}).get(ts)

    def history(self, channel: str) -> list[StoredMessage]:
        """Top-level messages and replies of ``channel``, oldest first."""
        with self._lock:
            return sorted(self._messages.get(channel, {}).values(), key=lambda m: _ts_key(m.ts))

    def replies(self, channel: str, thread_ts: str) -> list[StoredMessage]:
        """Replies in the thread under ``thread_ts`` (not the parent), oldest first."""
        return [m for m in self.history(channel) if m.thread_ts == thread_ts and m.ts != thread_ts]


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros)
