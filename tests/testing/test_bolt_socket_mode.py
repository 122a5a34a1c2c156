"""A real Bolt app in Socket Mode runs against the stand-ins: commands, clicks, reconnects."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from slack_bolt import Ack, App, Respond
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk import WebClient

from bot.testing import SlackApiStandIn, SocketModeStandIn


class Seen:
    """What the app's listeners saw, readable from the test thread."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.actions: list[str] = []
        self.changed = threading.Condition()

    def add(self, bucket: list[str], value: str) -> None:
        with self.changed:
            bucket.append(value)
            self.changed.notify_all()

    def wait(self, ready: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(ready, timeout=10), "the listener never ran"


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def handler(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn, seen: Seen
) -> Iterator[SocketModeHandler]:
    """A trivial Bolt app, its WebClient on the stand-in, connected in Socket Mode."""
    app = App(
        client=WebClient(token=slack.bot_token, base_url=slack.url),
        token_verification_enabled=False,
    )

    @app.command("/kimi")
    def kimi(ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        ack()
        seen.add(seen.texts, command["text"])
        respond(f"got {command['text']}")

    @app.action("apply")
    def apply(ack: Ack, body: dict[str, Any], client: WebClient) -> None:
        ack()
        seen.add(seen.actions, body["actions"][0]["value"])
        client.chat_postMessage(channel=body["channel"]["id"], text="applying")

    socket = SocketModeHandler(app, app_token=slack.app_token)
    socket.connect()
    socket_mode.wait_for_connection()
    yield socket
    socket.close()


def test_a_slash_command_is_acked_handled_and_answered_on_response_url(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn, seen: Seen, handler: SocketModeHandler
) -> None:
    """A pushed /kimi command is acked, the listener runs, and respond() reaches response_url."""
    sent = socket_mode.push_slash_command("status", user_id="U1", channel_id="C1")
    ack = socket_mode.wait_for_ack(sent.envelope_id, timeout=10)
    seen.wait(lambda: seen.texts == ["status"])
    url = sent.payload["response_url"]
    slack.wait_for(lambda calls: any(c.method == "response_url" for c in calls), timeout=10)
    assert ack.latency_s < 10
    assert [p.body["text"] for p in slack.response_posts(url)] == ["got status"]


def test_a_button_click_is_handled_and_its_message_posted(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn, seen: Seen, handler: SocketModeHandler
) -> None:
    """A block_actions payload reaches the action listener, which posts through the stand-in."""
    payload = {
        "type": "block_actions",
        "user": {"id": "U1", "username": "alice", "team_id": "T0KIMIOPS"},
        "api_app_id": "A0KIMIOPS",
        "team": {"id": "T0KIMIOPS", "domain": "kimi-ops-test"},
        "channel": {"id": "C1", "name": "ops"},
        "container": {"type": "message", "message_ts": "1767000000.000100", "channel_id": "C1"},
        "trigger_id": "1.2.abc",
        "response_url": slack.new_response_url(),
        "actions": [
            {
                "type": "button",
                "action_id": "apply",
                "block_id": "proposal",
                "value": "proposal-7",
                "action_ts": "1767000001.000000",
            }
        ],
    }
    sent = socket_mode.push_interactive(payload)
    socket_mode.wait_for_ack(sent.envelope_id, timeout=10)
    seen.wait(lambda: seen.actions == ["proposal-7"])
    slack.wait_for(lambda calls: any(c.method == "chat.postMessage" for c in calls), timeout=10)
    assert [m.text for m in slack.history("C1")] == ["applying"]


def test_after_a_disconnect_the_app_reconnects_and_handles_the_next_command(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn, seen: Seen, handler: SocketModeHandler
) -> None:
    """Slack's disconnect makes the app open a new URL and reconnect; a later command is handled."""
    first = socket_mode.push_slash_command("status")
    socket_mode.wait_for_ack(first.envelope_id, timeout=10)
    opened = len(slack.calls("apps.connections.open"))
    socket_mode.disconnect(reason="refresh_requested")
    socket_mode.wait_for_connection(count=2, timeout=15)
    assert len(slack.calls("apps.connections.open")) > opened
    second = socket_mode.push_slash_command("history")
    socket_mode.wait_for_ack(second.envelope_id, timeout=10)
    seen.wait(lambda: seen.texts == ["status", "history"])
