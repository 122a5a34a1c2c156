"""The Socket Mode stand-in speaks Slack's envelope protocol to a plain WebSocket client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from bot.errors import InputError
from bot.testing import SlackApiStandIn, SocketModeStandIn


def _open(slack: SlackApiStandIn) -> ClientConnection:
    """Open a connection the way Slack clients do: ask apps.connections.open for the URL."""
    url = WebClient(token=slack.app_token, base_url=slack.url).apps_connections_open(
        app_token=slack.app_token
    )["url"]
    return connect(url, compression=None)


def _receive(connection: ClientConnection) -> dict[str, Any]:
    message = json.loads(connection.recv(timeout=5))
    assert isinstance(message, dict)
    return message


def test_connections_open_hands_out_a_ws_url_to_this_server(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """apps.connections.open with the app token answers a ws:// URL on the stand-in's port."""
    client = WebClient(token=slack.app_token, base_url=slack.url)
    url = client.apps_connections_open(app_token=slack.app_token)["url"]
    assert url.startswith(f"ws://127.0.0.1:{socket_mode.port}/")
    assert slack.calls("apps.connections.open")[0].token == slack.app_token


def test_a_connection_is_greeted_with_hello(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """The first message on a new connection is Slack's hello with the app id."""
    with _open(slack) as connection:
        hello = _receive(connection)
        socket_mode.wait_for_connection()
    assert hello["type"] == "hello"
    assert hello["num_connections"] == 1
    assert hello["connection_info"]["app_id"].startswith("A")


def test_a_slash_command_envelope_has_slacks_fields_and_its_ack_is_collected(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """A pushed slash command comes in Slack's envelope; its ack's payload and latency are kept."""
    with _open(slack) as connection:
        _receive(connection)
        sent = socket_mode.push_slash_command("status", user_id="U1", channel_id="C1")
        envelope = _receive(connection)
        connection.send(json.dumps({"envelope_id": envelope["envelope_id"], "payload": {"a": 1}}))
        ack = socket_mode.wait_for_ack(sent.envelope_id)
    assert envelope["type"] == "slash_commands"
    assert envelope["envelope_id"] == sent.envelope_id
    assert envelope["accepts_response_payload"] is True
    payload = envelope["payload"]
    assert (payload["command"], payload["text"]) == ("/kimi", "status")
    assert (payload["user_id"], payload["channel_id"]) == ("U1", "C1")
    assert payload["response_url"].startswith(slack.origin + "/response/")
    assert payload["trigger_id"]
    assert ack.payload == {"a": 1}
    assert ack.latency_s >= 0


def test_interactive_and_events_envelopes_carry_their_payloads(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """push_interactive and push_event send envelopes of Slack's types around the payload."""
    block_actions = {"type": "block_actions", "actions": [{"action_id": "apply"}]}
    with _open(slack) as connection:
        _receive(connection)
        socket_mode.push_interactive(block_actions)
        socket_mode.push_event({"type": "app_mention", "text": "<@U0KIMIBOT> status"})
        interactive, event = _receive(connection), _receive(connection)
    assert (interactive["type"], interactive["payload"]) == ("interactive", block_actions)
    assert event["type"] == "events_api"
    assert event["payload"]["type"] == "event_callback"
    assert event["payload"]["event"]["type"] == "app_mention"


def test_disconnect_sends_slacks_message_then_closes(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """disconnect() sends {"type": "disconnect", "reason": ...} and then closes the socket."""
    with _open(slack) as connection:
        _receive(connection)
        socket_mode.wait_for_connection()
        socket_mode.disconnect(reason="refresh_requested")
        message = _receive(connection)
        with pytest.raises(ConnectionClosed):
            connection.recv(timeout=5)
    assert (message["type"], message["reason"]) == ("disconnect", "refresh_requested")


def test_a_push_goes_to_the_newest_connection(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """After a reconnect, envelopes go to the new connection."""
    with _open(slack) as old:
        _receive(old)
        with _open(slack) as new:
            _receive(new)
            socket_mode.wait_for_connection(count=2)
            sent = socket_mode.push_slash_command("history")
            assert _receive(new)["envelope_id"] == sent.envelope_id


def test_an_unknown_ack_is_not_taken_for_a_pushed_envelope(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """An ack naming an envelope never pushed is not recorded as anyone's ack."""
    with _open(slack) as connection:
        _receive(connection)
        sent = socket_mode.push_slash_command("status")
        _receive(connection)
        connection.send(json.dumps({"envelope_id": "not-pushed"}))
        with pytest.raises(TimeoutError, match=sent.envelope_id):
            socket_mode.wait_for_ack(sent.envelope_id, timeout=0.3)
    assert socket_mode.acks() == []
    assert [json.loads(m) for m in socket_mode.unmatched_messages()] == [
        {"envelope_id": "not-pushed"}
    ]


def test_push_without_a_connection_times_out(socket_mode: SocketModeStandIn) -> None:
    """Pushing while no client is connected raises TimeoutError instead of losing the envelope."""
    with pytest.raises(TimeoutError, match="no open connection"):
        socket_mode.push("interactive", {"type": "block_actions"}, timeout=0.2)


def test_an_unknown_envelope_type_is_refused(
    slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """push() refuses an envelope type Slack never sends, and sends nothing."""
    with _open(slack) as connection:
        _receive(connection)
        with pytest.raises(InputError, match="slash_commands"):
            socket_mode.push("shortcut", {})
        with pytest.raises(TimeoutError):
            connection.recv(timeout=0.2)


def test_stopping_detaches_from_connections_open(slack: SlackApiStandIn) -> None:
    """Once the Socket Mode stand-in stops, apps.connections.open no longer hands out its URL."""
    with SocketModeStandIn(slack):
        pass
    client = WebClient(token=slack.app_token, base_url=slack.url)
    with pytest.raises(SlackApiError) as caught:
        client.apps_connections_open(app_token=slack.app_token)
    assert "url" not in caught.value.response.data


def test_a_stand_in_never_started_has_no_port_and_stops_at_once(slack: SlackApiStandIn) -> None:
    """Before start() it binds nothing (port raises), and stop() returns without waiting."""
    stand_in = SocketModeStandIn(slack)
    with pytest.raises(RuntimeError, match="not started"):
        _ = stand_in.port
    stand_in.stop()
