"""Slack as a :class:`~bot.chat.replies.FrontEnd`: replies, proposals and live progress messages.

- A command's reply goes where :class:`Origin` says: proposals, status, hosts and history into
  the channel (``chat.postMessage``), errors, refusals, usage and help to the sender alone
  (its ``response_url``, else ``chat.postEphemeral``).
- An operation's progress edits one message (``chat.update``): the proposal's when it came
  from one, else the first one its progress posts; ready, failure, stall and rollback are
  announced in that message's thread. Message places live in the store (:mod:`._book`).
- A capacity report (asked for, or posted by a schedule through :meth:`SlackFrontEnd.post`) is
  one message in the channel; each host's chart is uploaded in its thread (``files_upload_v2``)
  and each recommendation posted as an ordinary proposal with Apply/Cancel.
- A proposal whose time is up is closed by the bot's sweep (:mod:`bot.slack.expiry`) through
  :meth:`SlackFrontEnd.close_expired`.
- A Slack error never stops a watcher: it is logged, and the next view replaces a lost edit;
  a final edit is tried again until it lands (``FINAL_ATTEMPTS``).

Called from the core's threads (watchers, the app's executor): thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.webhook import WebhookClient

from bot.chat.audit import Watch
from bot.chat.policy import Actor, RefusalKind
from bot.chat.progress import ProgressView
from bot.chat.replies import (
    CancelledReply,
    FleetProposalReply,
    FleetRefusalReply,
    FleetsReply,
    HelpReply,
    HistoryReply,
    HostsReply,
    MemoryNoticeReply,
    OperationReply,
    ProblemReply,
    ProposalReply,
    RefusalReply,
    RejoinReply,
    Reply,
    ReportReply,
    ReportScheduledReply,
    ReportSchedulesReply,
    ReportStoppedReply,
    RolloutReply,
    StatusReply,
    UsageReply,
)
from bot.fleet.view import RolloutView
from bot.slack import messages, report_messages, rollout_messages
from bot.slack._blocks import SlackMessage
from bot.slack._book import MessageBook

__all__ = ["FINAL_ATTEMPTS", "Origin", "SlackFrontEnd"]

log = logging.getLogger(__name__)

FINAL_ATTEMPTS = 6  # a final edit is tried this many times (each after the client's own retries)
_FINAL_BACKOFF_S = 1.0


@dataclass(frozen=True)
class _Posted:
    reply: ProposalReply
    channel: str
    ts: str


@dataclass(frozen=True)
class Origin:
    """Where a command came from: its channel, its sender and the ``response_url`` it carries."""

    channel: str
    user: str
    response_url: str | None = None


class SlackFrontEnd:
    """Lays the core's replies and views out through ``client`` (a ``WebClient`` on the Web
    API); ``channel`` is ``[slack] channel``, where proposals go (None: the command's)."""

    def __init__(
        self,
        client: WebClient,
        book: MessageBook,
        channel: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._book = book
        self._channel = channel
        self._sleep = sleep
        self._lock = threading.Lock()
        self._posting: dict[tuple[str, int], threading.Lock] = {}
        # Open proposals this process posted, to close them when they expire or go void.
        self._proposals: dict[int, _Posted] = {}

    # -- replies ---------------------------------------------------------------------------

    def channel_for(self, origin: Origin) -> str:
        """The channel a command's proposal (and so its operation) is posted in."""
        return self._channel or origin.channel

    def answer(self, origin: Origin) -> Callable[[Actor, Reply], None]:
        """Where the reply to a command from ``origin`` goes (the core's ``reply_to``)."""
        return lambda actor, reply: self._answer(origin, reply)

    def reply(self, actor: Actor, reply: Reply) -> None:
        """A reply with no command behind it (the core's default): to the configured channel."""
        if self._channel is None:
            log.warning("no [slack] channel for a reply to %s: %s", actor.id, type(reply).__name__)
            return
        self._answer(Origin(self._channel, actor.id), reply)

    def _answer(self, origin: Origin, reply: Reply) -> None:
        try:
            self._route(origin, reply)
        except SlackClientError as exc:
            log.warning("could not answer %s in %s: %s", origin.user, origin.channel, exc)

    def _route(self, origin: Origin, reply: Reply) -> None:
        if isinstance(reply, ProposalReply):
            self._post_proposal(origin, reply)
        elif isinstance(reply, StatusReply):
            self._visible(origin, [messages.status_card(reply)])
        elif isinstance(reply, HostsReply):
            self._visible(origin, [messages.hosts_message(reply)])
        elif isinstance(reply, HistoryReply):
            self._visible(origin, messages.history_pages(reply.host, reply.entries))
        elif isinstance(reply, HelpReply):
            self._private(origin, messages.help_message(reply.lines))
        elif isinstance(reply, UsageReply):
            self._private(origin, messages.ephemeral("usage", reply.reason, reply.usage))
        elif isinstance(reply, ProblemReply):
            self._private(origin, messages.ephemeral("error", reply.text))
        elif isinstance(reply, MemoryNoticeReply):
            self._post(origin.channel, messages.memory_notice(reply))
        elif isinstance(reply, RefusalReply):
            self._private(origin, messages.ephemeral("refused", reply.text))
            self._close_refused(reply)
        elif isinstance(reply, ReportReply):
            self._post_report(origin, reply)
        elif isinstance(reply, ReportScheduledReply):
            self._visible(origin, [report_messages.report_scheduled(reply)])
        elif isinstance(reply, ReportStoppedReply):
            self._visible(origin, [report_messages.report_stopped(reply)])
        elif isinstance(reply, ReportSchedulesReply):
            self._visible(origin, [report_messages.report_schedules(reply)])
        elif isinstance(reply, CancelledReply):
            self._close(reply.proposal_id, messages.cancelled_line(reply.by))
        elif isinstance(reply, FleetProposalReply | FleetRefusalReply | FleetsReply | RolloutReply):
            self._route_fleet(origin, reply)
        elif isinstance(reply, RejoinReply):
            self._visible(origin, [rollout_messages.rejoined(reply)])
        else:
            assert isinstance(reply, OperationReply)
            # The operation's own message (the proposal's) shows it from now on; every other
            # open proposal on that host is void.
            self._void_others(reply)

    def _post_proposal(self, origin: Origin, reply: ProposalReply) -> None:
        channel = self.channel_for(origin)
        try:
            posted = self._post(channel, messages.proposal(reply))
        except SlackApiError as exc:
            if not origin.user:  # a scheduled report's: no one to tell but the log
                log.warning("proposal #%s not posted in %s: %s", reply.id, channel, _error(exc))
                return
            self._private(origin, _post_failed(channel, exc))
            return
        self._book.attach_proposal(reply.id, posted)
        if reply.plan.fits:
            with self._lock:
                self._proposals[reply.id] = _Posted(reply, channel, posted)

    # -- capacity reports ------------------------------------------------------------------

    def post(self, channel: str, reply: Reply) -> None:
        """A scheduled report (or why it failed) to ``channel``, with no command behind it: the
        :class:`~bot.chat.replies.ReportPoster` the report scheduler posts through."""
        origin = Origin(channel, "")
        try:
            if isinstance(reply, ReportReply):
                self._post_report(origin, reply)
            elif isinstance(reply, ProblemReply):
                self._post(channel, messages.ephemeral("error", reply.text))
            else:
                self._route(origin, reply)
        except SlackClientError as exc:
            log.warning("could not post a %s in %s: %s", type(reply).__name__, channel, exc)

    def _post_report(self, origin: Origin, reply: ReportReply) -> None:
        """The report in the channel, each host's chart in its thread, then each recommendation
        as a proposal; a chart that fails to upload is logged and the others still go."""
        try:
            ts = self._post(origin.channel, report_messages.report(reply))
        except SlackApiError as exc:
            if not origin.user:
                raise  # a scheduled report's: post() logs it
            self._private(origin, _post_failed(origin.channel, exc))
            return
        for view in reply.hosts:
            chart = view.chart
            if chart is None:
                continue
            try:
                self._client.files_upload_v2(
                    channel=origin.channel,
                    thread_ts=ts,
                    file=chart.png,
                    filename=chart.filename,
                    title=report_messages.chart_title(view),
                    alt_txt=chart.alt,
                )
            except SlackClientError as exc:
                log.warning("chart of %s not uploaded in %s: %s", chart.host, origin.channel, exc)
        for view in reply.hosts:
            if view.proposal is not None:
                self._post_proposal(origin, view.proposal)
            if isinstance(view.fleet_proposal, FleetProposalReply):
                self._route_fleet(origin, view.fleet_proposal)

    def _void_others(self, reply: OperationReply) -> None:
        place = self._book.operation(reply.watch.host, reply.operation.id)
        started = reply.operation.created_at
        with self._lock:
            on_host = [p for p in self._proposals.values() if p.reply.host == reply.watch.host]
        for posted in on_host:
            if place is not None and posted.ts == place.ts:
                with self._lock:
                    self._proposals.pop(posted.reply.id, None)  # it became the operation's
            else:
                self._close(posted.reply.id, messages.void_line(posted.reply.host, started))

    def close_expired(self, proposal_id: int, expires_at: datetime) -> None:
        """Replace an expired proposal's buttons with the line saying so (a message this process
        did not post too: its place is in the store); raises what the Web API raises."""
        self._close(proposal_id, messages.expired_line(expires_at))

    def _close_refused(self, reply: RefusalReply) -> None:
        refusal = reply.refusal
        if refusal.proposal_id is None:
            return
        if refusal.kind is RefusalKind.EXPIRED:
            self._close(refusal.proposal_id, messages.expired_line(refusal.at))
        elif refusal.kind is RefusalKind.STALE:
            self._close(refusal.proposal_id, messages.void_line(refusal.host or "?", refusal.at))

    def _close(self, proposal_id: int, why: str) -> None:
        """Replace a proposal's buttons with ``why``."""
        place = self._book.proposal(proposal_id)
        if place is None or place.channel is None or place.ts is None:
            return
        with self._lock:
            shown = self._proposals.pop(proposal_id, None)
        reply = None if shown is None else shown.reply
        self._update(place.channel, place.ts, messages.closed_proposal(reply, proposal_id, why))

    def _visible(self, origin: Origin, pages: list[SlackMessage]) -> None:
        """The first page in the channel, the others in its thread."""
        try:
            first = self._post(origin.channel, pages[0])
            for page in pages[1:]:
                self._post(origin.channel, page, thread_ts=first)
        except SlackApiError as exc:
            self._private(origin, _post_failed(origin.channel, exc))

    def _private(self, origin: Origin, message: SlackMessage) -> None:
        if origin.response_url:
            answer = WebhookClient(origin.response_url).send(
                text=message.text,
                blocks=list(message.blocks),
                response_type="ephemeral",
                replace_original=False,
            )
            if answer.status_code == 200:
                return
            log.info("response_url refused (%s); using chat.postEphemeral", answer.status_code)
        self._client.chat_postEphemeral(
            channel=origin.channel, user=origin.user, text=message.text, blocks=message.blocks
        )

    # -- an operation ----------------------------------------------------------------------

    def progress(self, watch: Watch, view: ProgressView) -> None:
        shown = messages.progress(watch, view)
        attempts = FINAL_ATTEMPTS if view.finished else 1
        for attempt in range(attempts):
            try:
                self._show(watch, shown)
                return
            except SlackClientError as exc:
                log.warning("progress of %s #%s not shown: %s", watch.host, watch.operation_id, exc)
                if attempt + 1 < attempts:
                    self._sleep(_FINAL_BACKOFF_S)

    def _show(self, watch: Watch, shown: SlackMessage) -> None:
        with self._post_lock(watch):
            place = self._book.operation(watch.host, watch.operation_id)
            if place is None:
                log.warning("operation %s #%s is not recorded", watch.host, watch.operation_id)
                return
            if place.channel is not None and place.ts is not None:
                self._update(place.channel, place.ts, shown)
                return
            channel = place.channel or self._channel
            if channel is None:
                log.warning("no channel for operation %s #%s", watch.host, watch.operation_id)
                return
            self._book.attach_operation(place, channel, self._post(channel, shown))

    def _post_lock(self, watch: Watch) -> threading.Lock:
        with self._lock:
            return self._posting.setdefault((watch.host, watch.operation_id), threading.Lock())

    def notify(self, people: tuple[str, ...], watch: Watch, view: ProgressView) -> None:
        self._thread_reply(watch, messages.notice(people, watch, view))

    def unreachable(self, watch: Watch, since: datetime) -> None:
        self._thread_reply(watch, messages.unreachable(watch, since))

    def _thread_reply(self, watch: Watch, shown: SlackMessage) -> None:
        place = self._book.operation(watch.host, watch.operation_id)
        channel = (place.channel if place else None) or self._channel
        if channel is None:
            return
        for attempt in range(FINAL_ATTEMPTS):
            try:
                self._post(channel, shown, thread_ts=place.ts if place else None)
                return
            except SlackClientError as exc:
                log.warning("notice on %s #%s not posted: %s", watch.host, watch.operation_id, exc)
                if attempt + 1 < FINAL_ATTEMPTS:
                    self._sleep(_FINAL_BACKOFF_S)

    # -- fleets (the layout is bot.slack.rollout_messages') ---------------------------------

    def _route_fleet(
        self,
        origin: Origin,
        reply: FleetProposalReply | FleetRefusalReply | FleetsReply | RolloutReply,
    ) -> None:
        if isinstance(reply, FleetProposalReply):
            ts = self._post(self.channel_for(origin), rollout_messages.fleet_proposal(reply))
            self._book.attach_proposal(reply.id, ts)
        elif isinstance(reply, FleetRefusalReply):
            self._visible(origin, [rollout_messages.fleet_refusal(reply)])
        elif isinstance(reply, FleetsReply):
            self._visible(origin, [rollout_messages.fleets_message(reply)])
        else:
            self._private(origin, rollout_messages.rollout_started(reply))

    def rollout(self, view: RolloutView) -> None:
        """The rollout's one message (:class:`~bot.fleet.RolloutSink`): posted once, then
        edited in place; its place is kept in the store, as an operation's is."""
        shown = rollout_messages.rollout_message(view)
        try:
            with self._post_lock(Watch(f"fleet {view.fleet}", view.id, "", None, None)):
                place = self._book.rollout(view.id)
                if place is not None and place.channel is not None and place.ts is not None:
                    self._update(place.channel, place.ts, shown)
                    return
                channel = self._channel or (place.channel if place else None)
                if place is not None and channel is not None:
                    self._book.attach_rollout(view.id, channel, self._post(channel, shown))
        except SlackClientError as exc:
            log.warning("rollout #%s of fleet %s not shown: %s", view.id, view.fleet, exc)

    def replica_ended(self, view: RolloutView, host: str) -> None:
        """A reply in the rollout message's thread when one replica's line ends."""
        place = self._book.rollout(view.id)
        if place is None or place.channel is None or place.ts is None:
            return
        try:
            self._post(place.channel, rollout_messages.replica_end(view, host), thread_ts=place.ts)
        except SlackClientError as exc:
            log.warning("end of %s in rollout #%s not posted: %s", host, view.id, exc)

    # -- Web API ---------------------------------------------------------------------------

    def _post(self, channel: str, shown: SlackMessage, thread_ts: str | None = None) -> str:
        extra: dict[str, Any] = {} if thread_ts is None else {"thread_ts": thread_ts}
        answer = self._client.chat_postMessage(
            channel=channel, text=shown.text, blocks=list(shown.blocks), **extra
        )
        return str(answer["ts"])

    def _update(self, channel: str, ts: str, shown: SlackMessage) -> None:
        self._client.chat_update(channel=channel, ts=ts, text=shown.text, blocks=list(shown.blocks))


def _error(exc: SlackApiError) -> str:
    return str(exc.response.get("error", "error")) if exc.response is not None else str(exc)


def _post_failed(channel: str, exc: SlackApiError) -> SlackMessage:
    """The sender's line for a post Slack refused, chosen by its error code and HTTP status."""
    status = exc.response.status_code if exc.response is not None else 0
    return messages.post_failed(channel, _error(exc), status)
