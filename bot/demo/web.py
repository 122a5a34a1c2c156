"""``kimi-ops demo --web``: the demo's host, agent and store behind the real Slack app, shown as
a Slack channel in the browser.

The parts are the ones ``kimi-ops bot`` runs in HTTP mode: the Bolt app on uvicorn, its Web API
client, the core and the store; Slack itself is the stand-in of :mod:`bot.testing`, which also
serves the channel page (:mod:`bot.testing.web_channel`) on 127.0.0.1. What a person types in
the page reaches the app as a signed slash command, a click as a signed ``block_actions``, and
every message the app posts or edits is drawn as it lands.

Three people, under the demo's policy (a change needs a second person to apply it):
``ben`` proposes, ``ana`` is on call and may apply, ``eve`` may read but not apply.
``--script`` plays the demo's session into the page (ana restarts, ben asks for 300 GB, is
refused, proposes ratio 4, ana clicks Apply, eve tries too); without it the page waits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from bot.chat.config import ChatSettings, HostSettings, PolicySettings
from bot.demo._stack import TOKEN_ENV, DemoStack
from bot.errors import DemoError
from bot.reports import ReportSettings
from bot.settings import Secret
from bot.slack import HttpServer, SlackSettings, SlackTokens, bind, build_bot
from bot.slack.spec import APPLY_ACTION
from bot.store import Store
from bot.testing import SlackApiStandIn, StoredMessage
from bot.testing.web_channel import ChannelPage, Person, WebChannel

__all__ = ["ANA", "BEN", "EVE", "PEOPLE", "WebDemo", "play_script", "web_demo"]

HOST = "kimi-01"
ANA = Person("U0ANA", "ana", "on call: may apply a change another person proposed")
BEN = Person("U0BEN", "ben", "proposes changes; may apply another person's")
EVE = Person("U0EVE", "eve", "may read and propose, may not apply")
PEOPLE = (BEN, ANA, EVE)

# The final line of an operation's message, as bot.slack.messages words it.
_ENDED = ("*READY*", "*FAILED*", "*ROLLED BACK*", "*STALLED*")


@dataclass(frozen=True)
class WebDemo:
    """The running parts a person (or a test) reaches: the page's URL and its server side."""

    page_url: str
    page: WebChannel
    slack: SlackApiStandIn


@contextmanager
def web_demo(stack: DemoStack, store: Store, port: int = 0) -> Iterator[WebDemo]:
    """The Slack app over ``stack`` in HTTP mode, and the stand-in with its channel page on
    127.0.0.1:``port`` (0: any free port); everything stops on exit."""
    secret = os.urandom(16).hex()
    environ = {TOKEN_ENV: stack.token}
    chat = ChatSettings(
        hosts=(HostSettings(HOST, stack.agent_url, TOKEN_ENV, default=True),),
        policy=PolicySettings(appliers=frozenset({ANA.id, BEN.id}), require_second_person=True),
        update_interval_s=1.0,
    )
    with SlackApiStandIn(port=port) as slack:
        bot = build_bot(
            chat,
            SlackSettings(api_url=slack.url),
            SlackTokens(bot=Secret(slack.bot_token), signing_secret=Secret(secret)),
            store,
            environ,
            poll_wait_s=5.0,
            reports=ReportSettings(),
        )
        server = HttpServer(bot.app, bind("127.0.0.1", 0)).start()
        bot.start()
        try:
            page = slack.open_channel_page(ChannelPage(server.url, secret, PEOPLE))
            yield WebDemo(page_url=f"{slack.origin}/", page=page, slack=slack)
        finally:
            server.stop()
            bot.close()


def play_script(
    demo: WebDemo, say: Callable[[str], None] = print, timeout_s: float = 300.0
) -> None:
    """The demo's session, typed and clicked into the page as its people; raises DemoError at
    the first step that did not do what it should."""
    page = demo.page
    channel = page.page.channel

    def send(person: Person, text: str) -> None:
        say(f"{person.name}: /kimi {text}")
        status = page.command(person.id, text)
        if status != 200:
            raise DemoError(f"the app answered /kimi {text} with HTTP {status}")

    def until(what: str, found: Callable[[], StoredMessage | None]) -> StoredMessage:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = found()
            if message is not None:
                return message
            time.sleep(0.1)
        raise DemoError(f"the channel never showed {what} within {timeout_s:.0f} s")

    def newest(predicate: Callable[[StoredMessage], bool], after: int) -> StoredMessage | None:
        for message in reversed(demo.slack.history(channel)):
            if message.seq > after and predicate(message):
                return message
        return None

    def ended(after: int, ts: str | None = None) -> StoredMessage:
        # An applied proposal's message becomes the operation's: it is edited in place.
        def found() -> StoredMessage | None:
            if ts is not None:
                message = demo.slack.message(channel, ts)
                return message if message is not None and _ended(message) else None
            return newest(lambda m: _ended(m) is not None, after)

        message = until("the operation's end", found)
        if _ended(message) != "*READY*":
            raise DemoError(f"the operation ended {_ended(message)}: {message.text[:200]}")
        return message

    mark = _last_seq(demo)
    send(ANA, "restart")
    ended(mark)
    send(ANA, "status")
    mark = _last_seq(demo)
    send(BEN, "resize size 300")
    until("the refusal", lambda: newest(lambda m: "refused" in m.text, mark))
    mark = _last_seq(demo)
    send(BEN, "resize ratio 4")
    proposal = until("the proposal", lambda: newest(lambda m: _apply_button(m) is not None, mark))
    button = _apply_button(proposal)
    assert button is not None
    say("ana clicks Apply")
    mark = _last_seq(demo)
    page.click(ANA.id, proposal.ts, APPLY_ACTION, button)
    ended(mark, proposal.ts)
    mark = _last_seq(demo)
    say("eve clicks Apply too")
    page.click(EVE.id, proposal.ts, APPLY_ACTION, button)
    until("eve's refusal", lambda: _ephemeral_after(demo, EVE, mark))
    send(BEN, "history")
    send(ANA, "report")


def _last_seq(demo: WebDemo) -> int:
    channel = demo.page.page.channel
    seqs = [m.seq for m in demo.slack.history(channel)]
    seqs += [e.seq for p in PEOPLE for e in demo.slack.ephemerals(channel, p.id)]
    return max(seqs, default=0)


def _ephemeral_after(demo: WebDemo, person: Person, after: int) -> StoredMessage | None:
    replies = [e for e in demo.slack.ephemerals(demo.page.page.channel, person.id) if e.seq > after]
    if not replies:
        return None
    last = replies[-1]
    return StoredMessage(last.channel, "", last.text, last.blocks, None, seq=last.seq)


def _ended(message: StoredMessage) -> str | None:
    """The final state an operation's message shows, when it shows one."""
    shown = _block_texts(message)
    return next((word for word in _ENDED if any(word in text for text in shown)), None)


def _block_texts(message: StoredMessage) -> list[str]:
    texts = [message.text]
    for block in message.blocks:
        if not isinstance(block, dict):
            continue
        parts = [block.get("text"), *(block.get("fields") or ()), *(block.get("elements") or ())]
        texts += [str(p.get("text")) for p in parts if isinstance(p, dict) and p.get("text")]
    return texts


def _apply_button(message: StoredMessage) -> str | None:
    """The Apply button's value (the proposal's id) when ``message`` carries one."""
    for block in message.blocks:
        if isinstance(block, dict) and block.get("type") == "actions":
            for element in block.get("elements") or ():
                if isinstance(element, dict) and element.get("action_id") == APPLY_ACTION:
                    return str(element.get("value") or "") or None
    return None
