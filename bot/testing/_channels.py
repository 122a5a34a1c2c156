"""The stand-in's copy of each channel: messages by ``ts``, their current text and blocks, and
the ephemeral replies each user was shown.

Slack's ``ts`` is a Unix time with six decimals, unique within a channel and increasing, e.g.
``"1767000000.000100"``; the stand-in counts up from that value per channel so tests can compare
timestamps as Slack clients do (as strings of equal length, or as decimals).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["ChannelStore", "StoredEphemeral", "StoredMessage"]

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
    seq: int = 0  # its place among the channel's posts and ephemeral replies, from 1


@dataclass(frozen=True)
class StoredEphemeral:
    """A reply only ``user`` sees in ``channel`` (``chat.postEphemeral``, or an ephemeral post
    to a ``response_url``); ``seq`` places it among the channel's messages."""

    channel: str
    user: str
    text: str
    blocks: tuple[Any, ...]
    seq: int


class ChannelStore:
    """Messages per channel and ephemeral replies per user; thread-safe.

    ``version`` counts every change (a post, an edit, an ephemeral reply), so a reader that
    draws the channel (the stand-in's channel page) waits with :meth:`wait_for_change` and
    redraws only when something changed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._messages: dict[str, dict[str, StoredMessage]] = {}
        self._counters: dict[str, int] = {}
        self._ephemerals: list[StoredEphemeral] = []
        self._version = 0
        self._seq = 0  # posts and ephemeral replies, in the order they arrived

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def wait_for_change(self, since: int, timeout: float) -> int:
        """Block until ``version`` is past ``since`` or ``timeout`` seconds passed; the version."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != since, timeout)
            return self._version

    def _bump(self) -> None:
        # Called with the lock held.
        self._version += 1
        self._changed.notify_all()

    def post_ephemeral(
        self, channel: str, user: str, text: str, blocks: list[Any] | None
    ) -> StoredEphemeral:
        """Keep a reply only ``user`` sees; it never joins the channel's history."""
        with self._lock:
            self._seq += 1
            reply = StoredEphemeral(channel, user, text, tuple(blocks or ()), self._seq)
            self._ephemerals.append(reply)
            self._bump()
            return reply

    def ephemerals(self, channel: str, user: str) -> list[StoredEphemeral]:
        """The replies ``user`` was shown in ``channel``, oldest first."""
        with self._lock:
            return [e for e in self._ephemerals if e.channel == channel and e.user == user]

    def channels(self) -> list[str]:
        """Every channel that holds a message, in the order of their first message."""
        with self._lock:
            return list(self._messages)

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
            self._seq += 1
            message = StoredMessage(
                channel=channel,
                ts=ts,
                text=text,
                blocks=tuple(blocks or ()),
                thread_ts=thread_ts,
                files=files,
                seq=self._seq,
            )
            self._messages.setdefault(channel, {})[ts] = message
            self._bump()
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
            self._bump()
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
