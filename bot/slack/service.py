"""The composition root of ``kimi-ops bot``: the core, the Slack front end, the executor, the
Bolt app and capacity reports (the report desk, and the database's one report scheduler when
:meth:`SlackBot.start_scheduler` is called), built from settings; every part a test may replace
is a parameter."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
from slack_bolt import App

from bot.chat.adoption import adopt_abandoned
from bot.chat.agent_client import revisions_source
from bot.chat.config import ChatSettings
from bot.chat.core import ChatCore, build_core
from bot.chat.fleet_commands import attach_fleets
from bot.chat.policy import Actor
from bot.chat.store_audit import StoreAudit
from bot.clock import Clock, SystemClock
from bot.fleet import FleetSettings
from bot.reports import ReportSettings
from bot.reports.runtime import ReportDesk, ReportScheduler, attach_reports, start_scheduler
from bot.slack._book import MessageBook
from bot.slack.app import bot_user_id, build_app, web_client
from bot.slack.config import SlackSettings, SlackTokens
from bot.slack.dispatch import Dispatch
from bot.slack.expiry import ProposalSweep
from bot.slack.front import SlackFrontEnd
from bot.slack.usergroups import DEFAULT_GROUPS_TTL_S, UserGroups
from bot.store import Store

__all__ = ["DEFAULT_SWEEP_S", "DEFAULT_WORKERS", "SlackBot", "build_bot"]

log = logging.getLogger(__name__)

#: How often proposals whose time is up get their buttons replaced.
DEFAULT_SWEEP_S = 30.0
#: The executor's threads: commands and clicks being carried out at once (agent calls included).
DEFAULT_WORKERS = 8


@dataclass
class SlackBot:
    """A bot's parts; :meth:`start` resumes the watches, and every ``sweep_s`` closes expired
    proposals and watches the operations of applies that lost their agent's answer
    (:mod:`bot.chat.adoption`); :meth:`start_scheduler` starts the report scheduler;
    :meth:`close` stops all three (operations go on at their agents)."""

    app: App
    core: ChatCore
    front: SlackFrontEnd
    dispatch: Dispatch
    executor: ThreadPoolExecutor
    clock: Clock
    sweep_s: float = DEFAULT_SWEEP_S
    store: Store | None = None
    reports: ReportSettings | None = None
    desk: ReportDesk | None = None
    scheduler: ReportScheduler | None = None
    sweep: ProposalSweep | None = None  # closes and records expired proposals every sweep_s
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.core.resume()
        threading.Thread(target=self._sweep, name="slack-expiry", daemon=True).start()

    def start_scheduler(self) -> ReportScheduler:
        """Sample capacity and post scheduled reports through the front end; raises
        :class:`~bot.errors.SchedulerLocked` when another live bot runs this database's."""
        if self.desk is None or self.store is None or self.reports is None:
            raise RuntimeError("build_bot(reports=...) was not given report settings")
        self.scheduler = start_scheduler(
            self.core, self.desk, self.front, self.store, self.reports, self.clock
        )
        return self.scheduler

    def _sweep(self) -> None:
        while not self._stop.wait(self.sweep_s):
            if self.sweep is None:
                return
            try:
                self.sweep.run()
            except Exception:  # a store error must not end the sweeps
                log.exception("closing expired proposals failed")
            try:
                # An Apply whose answer was lost while its agent stayed silent past the apply's
                # patience is watched once the agent answers, without a restart of the bot.
                adopt_abandoned(self.core.context)
            except Exception:
                log.exception("looking for applied proposals' operations failed")

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()  # gives the lease up, so the next bot may take it at once
        self._stop.set()
        self.executor.shutdown(wait=True, cancel_futures=True)  # let running commands end
        self.core.close()


def build_bot(
    chat: ChatSettings,
    slack: SlackSettings,
    tokens: SlackTokens,
    store: Store,
    environ: Mapping[str, str],
    *,
    clock: Clock | None = None,
    transports: Mapping[str, httpx.BaseTransport] | None = None,
    poll_wait_s: float = 20.0,
    retry_s: float = 2.0,
    workers: int = DEFAULT_WORKERS,
    sweep_s: float = DEFAULT_SWEEP_S,
    reports: ReportSettings | None = None,
    metrics_transport: httpx.BaseTransport | None = None,
    groups_ttl_s: float = DEFAULT_GROUPS_TTL_S,
    fleets: Mapping[str, FleetSettings] | None = None,
) -> SlackBot:
    """The bot over ``store``; ``tokens.signing_secret`` set means HTTP mode; ``reports`` set
    means the ``report`` commands answer (else they say reports are not set up here); ``fleets``
    (``[fleets.NAME]``) set means the fleet commands answer, and a rollout a stopped bot left
    running is carried on at :meth:`SlackBot.start`."""
    client = web_client(tokens.bot, slack.api_url)
    book = MessageBook(store)
    front = SlackFrontEnd(client, book, slack.channel)
    audit = StoreAudit(store, revisions_source(chat, environ, transports))
    the_clock = clock or SystemClock()
    sweep = ProposalSweep(audit, book, front, the_clock)
    core = build_core(
        chat,
        audit,
        front,
        environ,
        clock=the_clock,
        channel=slack.channel or "slack",
        transports=transports,
        poll_wait_s=poll_wait_s,
        retry_s=retry_s,
        reports_proposer=bot_user_id(client),
    )
    if fleets:
        attach_fleets(core.context, store, fleets, front)
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kimi-slack")
    groups = chat.policy.usergroups
    actors = UserGroups(client, groups, groups_ttl_s).actor if groups else Actor
    dispatch = Dispatch(core, front, executor, actors)
    app = build_app(client, dispatch, tokens.signing_secret)
    desk = None if reports is None else attach_reports(core, store, reports, metrics_transport)
    return SlackBot(
        app, core, front, dispatch, executor, the_clock, sweep_s, store, reports, desk, sweep=sweep
    )
