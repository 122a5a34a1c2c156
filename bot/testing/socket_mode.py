"""A local stand-in for Slack's Socket Mode WebSocket, reached through the Web API stand-in.

It replaces the ``wss://wss-primary.slack.com/link/...`` endpoint: ``apps.connections.open`` on
the attached :class:`~bot.testing.slack_api.SlackApiStandIn` answers with this server's
``ws://127.0.0.1:<port>/link/?ticket=N`` URL. On each connection it sends Slack's ``hello``; the
test pushes envelopes (``slash_commands``, ``interactive``, ``events_api``) to the newest
connection and reads the app's acks by ``envelope_id``, with the latency from push to ack.
``disconnect()`` sends Slack's ``{"type": "disconnect", "reason": ...}`` and closes the socket,
after which a Slack client opens a new URL through ``apps.connections.open`` and reconnects.

It does not do: TLS, Slack's own pings (the client's pings are answered), redelivery of unacked
envelopes (``retry_attempt`` stays 0), several apps, or ``too_many_websockets`` limits.

Usage::

    with SlackApiStandIn() as slack, SocketModeStandIn(slack) as socket:
        ...  # start the app with app_token=slack.app_token and WebClient(base_url=slack.url)
        socket.wait_for_connection()
        sent = socket.push_slash_command("status", user_id="U1", channel_id="C1")
        ack = socket.wait_for_ack(sent.envelope_id)
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

from bot.errors import InputError
from bot.testing._background import BackgroundServer
from bot.testing._payloads import APP_ID, slash_command_payload
from bot.testing._web_api import SlackApiStandIn

__all__ = ["Envelope", "EnvelopeAck", "SocketModeStandIn"]

ENVELOPE_TYPES = frozenset({"slash_commands", "interactive", "events_api"})


@dataclass(frozen=True)
class Envelope:
    """An envelope as pushed to the app, and when (``time.monotonic()``)."""

    envelope_id: str
    type: str
    payload: dict[str, Any]
    pushed_at: float


@dataclass(frozen=True)
class EnvelopeAck:
    """The app's acknowledgement of one envelope; ``payload`` is its response payload, if any."""

    envelope_id: str
    payload: dict[str, Any] | None
    acked_at: float
    latency_s: float


class SocketModeStandIn(BackgroundServer):
    """Slack's Socket Mode server on 127.0.0.1, in a background thread; see the module docs."""

    def __init__(self, web_api: SlackApiStandIn, *, default_timeout: float = 5.0) -> None:
        super().__init__()
        self._web_api = web_api
        self._timeout = default_timeout
        self._changed = threading.Condition()
        self._open: list[ServerConnection] = []
        self._accepted = 0
        self._tickets = itertools.count(1)
        self._pushed: dict[str, Envelope] = {}
        self._acks: dict[str, EnvelopeAck] = {}
        self._unmatched: list[str] = []
        self._server: Server | None = None

    # -- lifecycle -------------------------------------------------------------------------

    _thread_name = "socket-mode-stand-in"

    def _serve(self) -> None:
        self._bound().serve_forever()

    def _shutdown(self) -> None:
        self._bound().shutdown()

    def start(self) -> Self:
        if self._server is None:
            # Bound here, not in __init__: a server that never served could not be shut down.
            # No deflate: Slack's built-in client does not offer it; no server pings: the
            # client pings and the server answers, which is what keeps a Slack session alive.
            self._server = serve(
                self._serve_connection, "127.0.0.1", 0, compression=None, ping_interval=None
            )
        super().start()
        self._web_api.attach_socket_mode(self._issue_url)
        return self

    def stop(self) -> None:
        self._web_api.attach_socket_mode(None)
        super().stop()
        self._server = None

    def _bound(self) -> Server:
        if self._server is None:
            raise RuntimeError("the Socket Mode stand-in is not started; call start() first")
        return self._server

    @property
    def port(self) -> int:
        """The port it listens on (only once started)."""
        return int(self._bound().socket.getsockname()[1])

    def _issue_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/link/?ticket={next(self._tickets)}"

    # -- connections -----------------------------------------------------------------------

    @property
    def connections_accepted(self) -> int:
        """How many WebSocket connections were opened so far (reconnects included)."""
        with self._changed:
            return self._accepted

    def wait_for_connection(self, count: int = 1, timeout: float | None = None) -> None:
        """Block until ``count`` connections were accepted in all and one is open."""
        self._wait(
            lambda: self._accepted >= count and bool(self._open),
            timeout,
            f"no Socket Mode connection number {count} within {{timeout}} s",
        )

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Send Slack's ``disconnect`` message to every open connection, then close them."""
        with self._changed:
            connections = list(self._open)
        message = json.dumps(
            {"type": "disconnect", "reason": reason, "debug_info": {"host": "kimi-ops-stand-in"}}
        )
        for connection in connections:
            try:
                connection.send(message)
                connection.close(code=1000, reason=reason)
            except ConnectionClosed:
                pass

    def _serve_connection(self, connection: ServerConnection) -> None:
        with self._changed:
            self._accepted += 1
            self._open.append(connection)
            self._changed.notify_all()
        try:
            hello = {
                "type": "hello",
                "num_connections": 1,
                "debug_info": {"host": "kimi-ops-stand-in", "approximate_connection_time": 3600},
                "connection_info": {"app_id": APP_ID},
            }
            connection.send(json.dumps(hello))
            for message in connection:
                self._receive(message if isinstance(message, str) else message.decode())
        except ConnectionClosed:
            pass
        finally:
            with self._changed:
                if connection in self._open:
                    self._open.remove(connection)
                self._changed.notify_all()

    def _receive(self, message: str) -> None:
        now = time.monotonic()
        try:
            data = json.loads(message)
        except json.JSONDecodeError:
            data = None
        with self._changed:
            envelope_id = data.get("envelope_id") if isinstance(data, dict) else None
            pushed = self._pushed.get(envelope_id) if isinstance(envelope_id, str) else None
            if pushed is None or not isinstance(data, dict):
                self._unmatched.append(message)
            elif pushed.envelope_id not in self._acks:
                payload = data.get("payload")
                self._acks[pushed.envelope_id] = EnvelopeAck(
                    envelope_id=pushed.envelope_id,
                    payload=payload if isinstance(payload, dict) else None,
                    acked_at=now,
                    latency_s=now - pushed.pushed_at,
                )
            self._changed.notify_all()

    # -- envelopes -------------------------------------------------------------------------

    def push(
        self,
        envelope_type: str,
        payload: dict[str, Any],
        *,
        accepts_response_payload: bool = False,
        timeout: float | None = None,
    ) -> Envelope:
        """Send an envelope to the newest open connection (waiting for one) and return it."""
        if envelope_type not in ENVELOPE_TYPES:
            raise InputError(
                f"envelope type {envelope_type!r} is not one Slack sends; "
                f"use one of {sorted(ENVELOPE_TYPES)}"
            )
        self._wait(lambda: bool(self._open), timeout, "no open connection within {timeout} s")
        with self._changed:
            connection = self._open[-1]
            envelope = Envelope(str(uuid.uuid4()), envelope_type, payload, time.monotonic())
            self._pushed[envelope.envelope_id] = envelope
        connection.send(
            json.dumps(
                {
                    "envelope_id": envelope.envelope_id,
                    "type": envelope_type,
                    "payload": payload,
                    "accepts_response_payload": accepts_response_payload,
                    "retry_attempt": 0,
                    "retry_reason": "",
                }
            )
        )
        return envelope

    def push_slash_command(
        self,
        text: str,
        user_id: str = "U0ALICE",
        channel_id: str = "C0OPS",
        *,
        command: str = "/kimi",
        **fields: str,
    ) -> Envelope:
        """Push ``/kimi <text>`` with a ``response_url`` on the Web API stand-in."""
        payload = slash_command_payload(
            command=command,
            text=text,
            user_id=user_id,
            channel_id=channel_id,
            response_url=self._web_api.new_response_url(),
            **fields,
        )
        return self.push("slash_commands", payload, accepts_response_payload=True)

    def push_interactive(self, payload: dict[str, Any]) -> Envelope:
        """Push an ``interactive`` payload (``block_actions``, ``view_submission``...) as given."""
        return self.push("interactive", payload)

    def push_event(self, event: dict[str, Any]) -> Envelope:
        """Push an ``events_api`` envelope wrapping ``event`` in an ``event_callback``."""
        payload = {
            "type": "event_callback",
            "api_app_id": APP_ID,
            "event": event,
            "event_id": f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
        }
        return self.push("events_api", payload)

    def wait_for_ack(self, envelope_id: str, timeout: float | None = None) -> EnvelopeAck:
        """Block until the app acks ``envelope_id``; raise TimeoutError if it does not."""
        self._wait(
            lambda: envelope_id in self._acks, timeout, f"no ack for {envelope_id} in {{timeout}} s"
        )
        with self._changed:
            return self._acks[envelope_id]

    def acks(self) -> list[EnvelopeAck]:
        """Every ack so far, in the order they arrived."""
        with self._changed:
            return sorted(self._acks.values(), key=lambda a: a.acked_at)

    def unmatched_messages(self) -> list[str]:
        """Messages from the app that were not the first ack of an envelope pushed here."""
        with self._changed:
            return list(self._unmatched)

    def _wait(self, ready: Callable[[], bool], timeout: float | None, message: str) -> None:
        limit = self._timeout if timeout is None else timeout
        with self._changed:
            if not self._changed.wait_for(ready, limit):
                raise TimeoutError(message.format(timeout=limit))
