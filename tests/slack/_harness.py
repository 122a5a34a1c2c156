"""The real Slack app, HTTP mode or Socket Mode, against the Slack stand-ins, a real agent on
the simulator and a real SQLite store: what the Slack tests drive and read."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from slack_bolt.adapter.socket_mode import SocketModeHandler

from bot.chat.config import ChatSettings
from bot.clock import Clock
from bot.reports import ReportSettings
from bot.settings import Secret
from bot.slack import HttpServer, SlackBot, SlackSettings, SlackTokens, bind, build_bot
from bot.slack.spec import APPLY_ACTION, CANCEL_ACTION
from bot.store import Store
from bot.testing import (
    SignedRequest,
    SlackApiStandIn,
    SlackRequestSigner,
    SocketModeStandIn,
    StoredMessage,
    block_actions_payload,
)
from tests.chat._core_fixtures import chat_settings
from tests.chat.conftest import TOKEN, TOKEN_ENV

SIGNING_SECRET = "5f1e7c0a9b2d4e6f8a0c1e3b5d7f9a1c"
CHANNEL = "C0OPS"
ANA, BEN, EVE = "U0ANA", "U0BEN", "U0EVE"  # ana and ben may apply; eve may not


def settings_for(agent_url: str, host: str = "kimi-01", **policy: Any) -> ChatSettings:
    return chat_settings({host: agent_url}, appliers=(ANA, BEN), **policy)


@dataclass
class RunningBot:
    """One bot process's worth of parts, and how a test talks to it."""

    bot: SlackBot
    slack: SlackApiStandIn
    url: str = ""  # HTTP mode's /slack/events
    server: HttpServer | None = None
    socket: SocketModeHandler | None = None

    # -- HTTP mode -------------------------------------------------------------------------

    def post(self, request: SignedRequest) -> httpx.Response:
        return httpx.post(self.url, content=request.body, headers=request.headers, timeout=30)

    def command(self, text: str, user: str, signer: SlackRequestSigner) -> str:
        """Send ``/kimi text`` signed; assert the ack; its response_url."""
        response_url = self.slack.new_response_url()
        request = signer.slash_command(
            text, response_url=response_url, user_id=user, channel_id=CHANNEL
        )
        answer = self.post(request)
        assert answer.status_code == 200, answer.text
        return response_url

    def click(self, action: str, proposal: int, user: str, signer: SlackRequestSigner) -> str:
        response_url = self.slack.new_response_url()
        answer = self.post(signer.interactive(click_payload(action, proposal, user, response_url)))
        assert answer.status_code == 200, answer.text
        return response_url


def click_payload(action: str, proposal: int, user: str, response_url: str) -> dict[str, Any]:
    """A ``block_actions`` payload for a proposal's Apply or Cancel button, as Slack sends it."""
    return block_actions_payload(
        user_id=user,
        channel_id=CHANNEL,
        message_ts="0",
        action_id=action,
        value=str(proposal),
        block_id=f"proposal-{proposal}",
        response_url=response_url,
    )


APPLY, CANCEL = APPLY_ACTION, CANCEL_ACTION


def _build(
    slack: SlackApiStandIn,
    settings: ChatSettings,
    store: Store,
    clock: Clock | None,
    http: bool,
    reports: ReportSettings | None = None,
    **options: Any,
) -> SlackBot:
    tokens = SlackTokens(
        bot=Secret(slack.bot_token),
        app=None if http else Secret(slack.app_token),
        signing_secret=Secret(SIGNING_SECRET) if http else None,
    )
    return build_bot(
        settings,
        SlackSettings(api_url=slack.url),
        tokens,
        store,
        {TOKEN_ENV: TOKEN},
        clock=clock,
        poll_wait_s=5.0,
        retry_s=0.2,
        reports=reports,
        **options,
    )


@contextmanager
def http_bot(
    slack: SlackApiStandIn,
    settings: ChatSettings,
    store: Store,
    clock: Clock | None = None,
    reports: ReportSettings | None = None,
    **options: Any,
) -> Iterator[RunningBot]:
    """The bot in HTTP mode, uvicorn on a free port, resuming what the store holds; with
    ``reports``, its report commands answer (no scheduler: a test starts one if it needs it);
    ``options`` go to :func:`~bot.slack.build_bot` (``sweep_s``, ``groups_ttl_s``)."""
    bot = _build(slack, settings, store, clock, http=True, reports=reports, **options)
    server = HttpServer(bot.app, bind("127.0.0.1", 0)).start()
    bot.start()
    try:
        yield RunningBot(bot, slack, url=server.url, server=server)
    finally:
        server.stop()
        bot.close()


@contextmanager
def socket_bot(
    slack: SlackApiStandIn,
    socket_mode: SocketModeStandIn,
    settings: ChatSettings,
    store: Store,
    reports: ReportSettings | None = None,
) -> Iterator[RunningBot]:
    """The bot in Socket Mode, connected through the stand-in's apps.connections.open; with
    ``reports``, its report commands answer (no scheduler)."""
    bot = _build(slack, settings, store, None, http=False, reports=reports)
    handler = SocketModeHandler(bot.app, app_token=slack.app_token)
    handler.connect()  # type: ignore[no-untyped-call]
    socket_mode.wait_for_connection()
    bot.start()
    try:
        yield RunningBot(bot, slack, socket=handler)
    finally:
        handler.close()  # type: ignore[no-untyped-call]
        bot.close()


# -- reading what Slack got --------------------------------------------------------------------


def wait_until(ready: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def text_of(message: StoredMessage | dict[str, Any]) -> str:
    """Every text of a message's blocks, joined (what a person reads)."""
    blocks = message.blocks if isinstance(message, StoredMessage) else message.get("blocks", [])
    return json.dumps(list(blocks), ensure_ascii=False)


def top_level(slack: SlackApiStandIn) -> list[StoredMessage]:
    return [m for m in slack.history(CHANNEL) if m.thread_ts is None]


def proposal_message(slack: SlackApiStandIn, proposal_id: int) -> StoredMessage:
    for message in top_level(slack):
        if f"Proposal #{proposal_id} " in message.text:
            return message
    raise AssertionError(f"no message for proposal #{proposal_id}")


def posted_proposal_id(slack: SlackApiStandIn, before: int = 0) -> int:
    """The id in the newest proposal message posted after ``before`` top-level messages."""
    wait_until(
        lambda: any(m.text.startswith("Proposal #") for m in top_level(slack)[before:]),
        what="a proposal message",
    )
    newest = [m for m in top_level(slack)[before:] if m.text.startswith("Proposal #")][-1]
    return int(newest.text.split("#", 1)[1].split(" ", 1)[0])


def ephemerals(slack: SlackApiStandIn, response_url: str) -> list[str]:
    return [str(post.body.get("text", "")) for post in slack.response_posts(response_url)]


def wait_ephemeral(slack: SlackApiStandIn, response_url: str) -> str:
    wait_until(lambda: bool(slack.response_posts(response_url)), what="an ephemeral reply")
    return ephemerals(slack, response_url)[0]
