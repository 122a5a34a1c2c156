"""The composition root of ``kimi-ops bot``: the core, the Slack front end, the executor and the
Bolt app, built from settings; every part a test may replace is a parameter."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from slack_bolt import App

from bot.chat.agent_client import revisions_source
from bot.chat.config import ChatSettings
from bot.chat.core import ChatCore, build_core
from bot.chat.store_audit import StoreAudit
from bot.clock import Clock
from bot.slack._book import MessageBook
from bot.slack.app import build_app, web_client
from bot.slack.config import SlackSettings, SlackTokens
from bot.slack.dispatch import Dispatch
from bot.slack.front import SlackFrontEnd
from bot.store import Store

__all__ = ["DEFAULT_WORKERS", "SlackBot", "build_bot"]

#: The executor's threads: commands and clicks being carried out at once (agent calls included).
DEFAULT_WORKERS = 8


@dataclass
class SlackBot:
    """A running bot's parts; :meth:`close` stops the watchers (operations go on at agents)."""

    app: App
    core: ChatCore
    front: SlackFrontEnd
    dispatch: Dispatch
    executor: ThreadPoolExecutor

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
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
) -> SlackBot:
    """The bot over ``store``; ``tokens.signing_secret`` set means HTTP mode."""
    client = web_client(tokens.bot, slack.api_url)
    front = SlackFrontEnd(client, MessageBook(store), slack.channel)
    audit = StoreAudit(store, revisions_source(chat, environ, transports))
    core = build_core(
        chat,
        audit,
        front,
        environ,
        clock=clock,
        channel=slack.channel or "slack",
        transports=transports,
        poll_wait_s=poll_wait_s,
        retry_s=retry_s,
    )
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kimi-slack")
    dispatch = Dispatch(core, front, executor)
    app = build_app(client, dispatch, tokens.signing_secret)
    return SlackBot(app=app, core=core, front=front, dispatch=dispatch, executor=executor)
