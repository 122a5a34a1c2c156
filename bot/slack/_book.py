"""Where each proposal and operation is shown in Slack, kept in the store.

A proposal's message is recorded when it is posted; applying it makes that message the
operation's (:meth:`bot.chat.store_audit.StoreAudit.record_operation` copies it), and an
operation without one gets the first message its progress posts. Kept in the store, not in
memory, so a restarted bot edits the same message (same channel and ts) to the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.errors import NotFound
from bot.store import Store

__all__ = ["Due", "MessageBook", "Place"]


@dataclass(frozen=True)
class Place:
    """A message's channel and ts (None: not posted yet); ``record`` is the store's row id."""

    record: int
    channel: str | None
    ts: str | None


@dataclass(frozen=True)
class Due:
    """An open proposal whose time is up: its id and when it expired."""

    proposal_id: int
    expires_at: datetime


class MessageBook:
    """Reads and writes the message places of proposals and operations."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def proposal(self, proposal_id: int) -> Place | None:
        try:
            record = self._store.proposal(proposal_id)
        except NotFound:
            return None
        return Place(record.id, record.channel, record.message_ts)

    def attach_proposal(self, proposal_id: int, ts: str) -> None:
        self._store.attach_proposal_message(proposal_id, ts)

    def expired_proposals(self, now: datetime) -> list[Due]:
        """Open proposals (nobody applied or cancelled them) whose time ran out by ``now``."""
        return [Due(r.id, r.expires_at) for r in self._store.expired_open_proposals(now)]

    def operation(self, host: str, operation_id: int) -> Place | None:
        record = self._store.operation_by_agent_id(host, operation_id)
        return None if record is None else Place(record.id, record.channel, record.message_ts)

    def attach_operation(self, place: Place, channel: str, ts: str) -> None:
        self._store.update_operation(place.record, channel=channel, message_ts=ts)

    def rollout(self, rollout_id: int) -> Place | None:
        """A fleet rollout's one message (None: no such rollout)."""
        try:
            record = self._store.rollout(rollout_id)
        except NotFound:
            return None
        return Place(record.id, record.channel, record.message_ts)

    def attach_rollout(self, rollout_id: int, channel: str, ts: str) -> None:
        self._store.set_rollout_message(rollout_id, channel, ts)
