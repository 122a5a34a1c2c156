"""Three ASGI layers around the agent's API: the bearer-token check, the body limit, and the
last-resort catch.

The token check runs before routing and before the body is read, so a request without one of
the accepted tokens (:mod:`bot.agent.tokens`) learns nothing (not whether the path exists, not
what the body should look like, not which tokens exist): it gets ``401 {"detail":
"unauthorized"}`` whatever is wrong with it. A read-only token may read and plan; anything else
gets ``403 {"detail": "forbidden: ..."}``, the same for every read-only token. The matched
token's caller name is left in the request's state (``request.state.caller``) for the routes
that record it. The catch turns an exception that escaped every handler into
``503 {"detail": ...}``, never a 500 with a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.agent.tokens import AgentToken, TokenSet

__all__ = [
    "CALLER_STATE",
    "READ_ONLY_REQUESTS",
    "TOKEN_STATE",
    "BearerAuth",
    "BodyLimit",
    "CatchAll",
    "matching_token",
]

log = logging.getLogger("bot.agent.http.app")

UNAUTHORIZED = json.dumps({"detail": "unauthorized"}).encode()
FORBIDDEN = json.dumps(
    {"detail": "forbidden: this token may read status, plans and operations, not change them"}
).encode()
#: The request-state key holding the matched token's caller name (None for an unnamed token).
CALLER_STATE = "caller"
#: The request-state key holding the matched token itself (what per-token limits count by).
TOKEN_STATE = "token"
#: What a read-only token may do besides GET and HEAD: planning changes nothing.
READ_ONLY_REQUESTS = frozenset({("POST", "/v1/plans"), ("POST", "/v1/live/plans")})


def matching_token(header: bytes | None, tokens: TokenSet) -> AgentToken | None:
    """The token ``header`` carries as ``Bearer <token>`` (scheme in any case), or None.
    ``b"Bearer s3cret"`` matches a token ``s3cret``; ``b"s3cret"`` and ``b"Basic ..."`` do not."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not value.strip():
        return None
    return tokens.match(value.strip())


def _may(token: AgentToken, method: str, path: str) -> bool:
    return not token.read_only or method in ("GET", "HEAD") or (method, path) in READ_ONLY_REQUESTS


async def _send_json(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    """Require ``Authorization: Bearer <token>`` with one of ``tokens`` on every HTTP path but
    ``open_paths``; a read-only token only on reads and plans."""

    def __init__(self, app: ASGIApp, tokens: TokenSet, open_paths: Collection[str]) -> None:
        self.app = app
        self._tokens = tokens
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self.app(scope, receive, send)
            return
        header = next(
            (value for name, value in scope["headers"] if name.lower() == b"authorization"), None
        )
        token = matching_token(header, self._tokens)
        if token is None:
            await _send_json(send, 401, UNAUTHORIZED, [(b"www-authenticate", b"Bearer")])
            return
        if not _may(token, scope["method"], scope["path"]):
            await _send_json(send, 403, FORBIDDEN, [])
            return
        state = scope.setdefault("state", {})
        state[CALLER_STATE] = token.name
        state[TOKEN_STATE] = token
        await self.app(scope, receive, send)


def _too_large(max_bytes: int) -> bytes:
    return json.dumps(
        {"detail": f"request body over {max_bytes} bytes; the agent's requests are small JSON"}
    ).encode()


class _BodyTooLarge(Exception):
    """Raised from ``receive`` when the streamed body passes the limit (it stops the app)."""


class BodyLimit:
    """Answer 413 to a request whose body is over ``max_bytes``, before reading past the limit:
    the declared ``Content-Length`` up front, a chunked body counted as it streams."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self._max = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next(
            (value for name, value in scope["headers"] if name.lower() == b"content-length"), None
        )
        if declared is not None and declared.strip().isdigit() and int(declared) > self._max:
            await _send_json(send, 413, _too_large(self._max), [(b"connection", b"close")])
            return
        received = 0
        exceeded = started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self._max:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def holding_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return  # the app's answer to a cut body (a 400, say): the 413 goes instead
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, holding_send)
        except _BodyTooLarge:
            pass
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started:
            await _send_json(send, 413, _too_large(self._max), [(b"connection", b"close")])


class CatchAll:
    """Answer 503 with the error's type when an exception escapes the app before a response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if started:
                return  # the client sees a cut response; nothing better can be sent now
            body = json.dumps(
                {"detail": f"the agent hit an unexpected {type(exc).__name__}; see its log"}
            ).encode()
            await _send_json(send, 503, body, [])
