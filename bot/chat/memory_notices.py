"""The agents' post-ready memory notices, posted once each in the channel of the host's last
operation.

An agent's watch (``bot.agent.engine.post_ready``) numbers every fall of the server's headroom
under the guard's floor and lists the recent ones in ``/v1/status``. The report scheduler reads
every host's status on each sampling turn (``[reports]``); after it, :meth:`MemoryNoticeDesk.
post_new` posts the notices it has not posted yet as :class:`~bot.chat.replies.MemoryNoticeReply`
where the host's last operation was posted, so the people who changed the server hear of it.
Notices older than the bot's start are left to the capacity report, which lists the last day's,
so a restarted bot does not post them again. A host whose last operation has no channel (none
yet, or run from the terminal) gets no post: the report and ``status`` still show the notice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from bot.chat.replies import MemoryNoticeReply, ReportPoster
from bot.clock import Clock
from bot.reports import HostReport
from bot.store import Store

__all__ = ["MemoryNoticeDesk"]

log = logging.getLogger(__name__)


class MemoryNoticeDesk:
    """Posts each host's new memory notices once (see the module docstring)."""

    def __init__(self, store: Store, poster: ReportPoster, clock: Clock) -> None:
        self._store = store
        self._poster = poster
        self._since = clock.now()
        self._posted: dict[str, set[tuple[int, str]]] = {}
        self._lock = threading.Lock()

    def post_new(self, reports: Sequence[HostReport]) -> list[MemoryNoticeReply]:
        """Post the notices of ``reports`` not posted before; the replies posted."""
        posted: list[MemoryNoticeReply] = []
        with self._lock:
            for report in reports:
                posted.extend(self._post_host(report))
        return posted

    def _post_host(self, report: HostReport) -> list[MemoryNoticeReply]:
        seen = self._posted.setdefault(report.host, set())
        # A notice is its number and time: an agent that starts a new state afresh counts
        # from 1 again, and its notices are new all the same.
        new = [
            n
            for n in report.memory_notices
            if (n.seq, n.at.isoformat()) not in seen and n.at >= self._since
        ]
        if not new:
            return []
        channel, operation_id = self._where(report)
        replies = [MemoryNoticeReply(report.host, n, operation_id) for n in new]
        for reply in replies:
            if channel is None:
                log.warning(
                    "memory notice %s on %s not posted (no channel of a last operation): %s",
                    reply.notice.seq,
                    report.host,
                    reply.notice.message,
                )
            else:
                self._poster.post(channel, reply)
            seen.add((reply.notice.seq, reply.notice.at.isoformat()))
        return replies if channel is not None else []

    def _where(self, report: HostReport) -> tuple[str | None, int | None]:
        """The channel of the host's last operation and the bot's id for it, when known."""
        last = report.last_operation
        if last is None:
            return None, None
        record = self._store.operation_by_agent_id(report.host, last.id)
        if record is None or record.channel is None:
            return None, None
        return record.channel, record.id
