"""Proposals nobody clicked, closed when their time runs out.

A proposal stops being applicable at its ``expires_at`` (``[policy] proposal_ttl_minutes``), but
its message would keep its Apply and Cancel buttons until someone clicked one. The bot sweeps
the store instead (:class:`ProposalSweep`, every ``sweep_s`` on its own timer, with or without
the report scheduler): each open proposal whose time is up gets its buttons replaced by the
"expired" line and is recorded expired. The store, not this process's memory, says what is
open, so proposals posted before a restart (or by another kimi-ops process on the same
database) are closed too.

A proposal whose message cannot be edited now (Slack down, rate limited) stays open in the store
and is tried again on the next sweep; applying it is refused meanwhile, since policy checks the
expiry itself.
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackClientError

from bot.chat.audit import Audit
from bot.clock import Clock
from bot.slack._book import MessageBook
from bot.slack.front import SlackFrontEnd

__all__ = ["ProposalSweep"]

log = logging.getLogger(__name__)


class ProposalSweep:
    """One sweep per :meth:`run`: close and record expired every open proposal whose time is up."""

    def __init__(self, audit: Audit, book: MessageBook, front: SlackFrontEnd, clock: Clock) -> None:
        self._audit = audit
        self._book = book
        self._front = front
        self._clock = clock

    def run(self) -> int:
        """How many proposals this sweep closed and recorded expired."""
        closed = 0
        for due in self._book.expired_proposals(self._clock.now()):
            try:
                self._front.close_expired(due.proposal_id, due.expires_at)
            except SlackClientError as exc:
                log.warning("expired proposal #%s not closed yet: %s", due.proposal_id, exc)
                continue
            self._audit.settle_expired(due.proposal_id)
            closed += 1
        return closed
