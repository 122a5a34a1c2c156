"""The line a sender gets when Slack refuses to post their message: an invite only when the bot
is not in the channel, an honest line for a rate limit or a fault on Slack's side."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from slack_sdk import WebClient

from bot.chat.policy import Actor
from bot.slack import Origin, SlackFrontEnd
from bot.slack._book import MessageBook
from bot.store import Store
from bot.testing import SlackApiStandIn
from tests.slack._harness import ephemerals
from tests.slack._samples import proposal_reply

CHANNEL = "C0OPS"
_INVITE = "/invite @kimi-ops"


@contextmanager
def _refusing_api(error: str) -> Iterator[str]:
    """A Web API on port 0 that answers every method as Slack answers a channel the bot may not
    post in: HTTP 200, ``{"ok": false, "error": error}`` (the stand-in has no channel
    membership, so this serves the two errors it cannot give)."""

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.dumps({"ok": False, "error": error}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _propose(slack: SlackApiStandIn, store: Store, api_url: str) -> str:
    """A proposal answered through a front end on ``api_url`` (no retries: each fault is seen);
    the text the sender was told on its response_url."""
    front = SlackFrontEnd(
        WebClient(token=slack.bot_token, base_url=api_url), MessageBook(store), sleep=lambda _: None
    )
    url = slack.new_response_url()
    front.answer(Origin(CHANNEL, "U0BEN", url))(Actor("U0BEN"), proposal_reply())
    (told,) = ephemerals(slack, url)
    return told


@pytest.mark.parametrize("error", ["not_in_channel", "channel_not_found"])
def test_a_channel_the_bot_is_not_in_asks_for_an_invite(
    slack: SlackApiStandIn, store: Store, error: str
) -> None:
    """Slack's not_in_channel or channel_not_found tells the sender to invite the bot, naming
    the channel and Slack's error."""
    with _refusing_api(error) as api_url:
        told = _propose(slack, store, api_url)
    assert f"could not post in <#{CHANNEL}> ({error})" in told, told
    assert _INVITE in told, told


def test_a_rate_limited_post_says_slack_is_rate_limiting_not_to_invite(
    slack: SlackApiStandIn, store: Store
) -> None:
    """A 429 from chat.postMessage tells the sender Slack is rate limiting and to try again,
    with no invite, and nothing reaches the channel."""
    slack.faults.fail_next("chat.postMessage", 1, status=429)
    told = _propose(slack, store, slack.url)
    assert f"could not post in <#{CHANNEL}>" in told, told
    assert "rate limiting" in told, told
    assert "HTTP 429" in told, told
    assert "try again" in told, told
    assert _INVITE not in told, told
    assert slack.history(CHANNEL) == []


@pytest.mark.parametrize("status", [500, 503])
def test_a_slack_server_error_says_the_fault_is_slacks_not_to_invite(
    slack: SlackApiStandIn, store: Store, status: int
) -> None:
    """A 500 or 503 from chat.postMessage tells the sender Slack failed on its side, with the
    status, and to try again; no invite, nothing in the channel."""
    slack.faults.fail_next("chat.postMessage", 1, status=status)
    told = _propose(slack, store, slack.url)
    assert f"Slack failed on its side (HTTP {status}" in told, told
    assert "try again" in told, told
    assert _INVITE not in told, told
    assert slack.history(CHANNEL) == []
