"""Connection hygiene for the agent's API server, at the HTTP protocol (below the ASGI app).

No token is read before a request's headers end, so what an unauthenticated client can hold
must be bounded before that: uvicorn's ``limit_concurrency`` answers 503 only once a request has
been parsed, and its keep-alive timeout only runs between requests, so a connection that never
finishes its headers would be held for ever. :func:`guarded_protocol` makes uvicorn's h11
protocol enforce, per connection:

- **caps**: at most ``max_connections`` open in all and ``max_connections_per_client`` per client
  address (:class:`ConnectionCounts`). One more is answered ``503`` with ``Retry-After`` and
  closed at once, before anything of it is parsed;
- **a header timeout**: a connection gets ``header_timeout_s`` to deliver a request's headers,
  counted from when it opened or its last response ended; then it is closed (``408`` when part of
  a request had come, silently when nothing had).

Refusals and the event loop's ``socket.accept() out of system resource`` reports are logged
through a :class:`~bot.log_throttle.LogThrottle`: one line a minute with the count, not one per
attempt (:func:`accept_error_handler`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from bot.log_throttle import LogThrottle

__all__ = ["ConnectionCounts", "accept_error_handler", "guarded_protocol"]

log = logging.getLogger("bot.agent.http.connections")

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: 42\r\n\r\n"
    b'{"detail": "too many connections; retry"}\n'
)
_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
_ACCEPT_FAILED = "socket.accept() out of system resource"


class ConnectionCounts:
    """Open connections in all and per client address, against their caps. Used from the
    event loop only."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total = total
        self.per_client = min(per_client, total)
        self._open = 0
        self._by_client: dict[str, int] = {}

    @property
    def open(self) -> int:
        return self._open

    def admit(self, client: str) -> str | None:
        """Count a new connection from ``client``; None, or why it is refused."""
        if self._open >= self.total:
            return f"{self._open} connections open, max_connections {self.total}"
        held = self._by_client.get(client, 0)
        if held >= self.per_client:
            return f"{held} connections open from {client}, max_connections_per_client " + str(
                self.per_client
            )
        self._open += 1
        self._by_client[client] = held + 1
        return None

    def release(self, client: str) -> None:
        self._open -= 1
        held = self._by_client.get(client, 0) - 1
        if held > 0:
            self._by_client[client] = held
        else:
            self._by_client.pop(client, None)


class _GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with the caps and the header timeout of the module docstring."""

    counts: ClassVar[ConnectionCounts]
    header_timeout_s: ClassVar[float]
    throttle: ClassVar[LogThrottle]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client_host: str | None = None  # set once admitted
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        host = self.client[0] if self.client else "unknown"
        refusal = self.counts.admit(host)
        if refusal is not None:
            self.throttle.warning("refused", "refused a connection from %s: %s", host, refusal)
            transport.write(_BUSY)
            transport.close()
            return
        self._client_host = host
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._client_host is not None:
            self.counts.release(self._client_host)
            self._client_host = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the headers are in (or the request was refused as malformed)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # waiting for the next request's headers

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _headers_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        partial, _ = self.conn.trailing_data
        if partial:
            self.throttle.warning(
                "header-timeout",
                "closed a connection from %s: no complete request headers in %g s",
                self._client_host,
                self.header_timeout_s,
            )
            self.transport.write(_TIMED_OUT)
        self.transport.close()


def guarded_protocol(
    counts: ConnectionCounts, header_timeout_s: float, throttle: LogThrottle
) -> type[asyncio.Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``: h11 with these limits."""
    return type(
        "GuardedH11Protocol",
        (_GuardedH11,),
        {"counts": counts, "header_timeout_s": header_timeout_s, "throttle": throttle},
    )


def accept_error_handler(
    throttle: LogThrottle,
) -> Any:
    """An event-loop exception handler that logs ``accept()`` failing for want of descriptors
    once a minute (asyncio reports each attempt, thousands a second) and passes anything else
    to the loop's default handler."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == _ACCEPT_FAILED:
            throttle.warning(
                "accept",
                "the agent cannot accept connections: %s; raise LimitNOFILE in its unit or "
                "lower [agent] max_connections",
                context.get("exception"),
            )
            return
        loop.default_exception_handler(context)

    return handle
