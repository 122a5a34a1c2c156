"""Two ASGI layers around the agent's API: the bearer-token check, and the last-resort catch.

The token check runs before routing and before the body is read, so a request without the right
token learns nothing (not whether the path exists, not what the body should look like): it gets
``401 {"detail": "unauthorized"}`` whatever is wrong with it. The catch turns an exception that
escaped every handler into ``503 {"detail": ...}``, never a 500 with a traceback.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.settings import Secret

__all__ = ["BearerAuth", "CatchAll", "token_matches"]

log = logging.getLogger("bot.agent.http.app")

UNAUTHORIZED = json.dumps({"detail": "unauthorized"}).encode()


def token_matches(header: bytes | None, token: Secret) -> bool:
    """True when ``header`` is ``Bearer <token>`` (scheme in any case), compared in constant
    time. ``b"Bearer s3cret"`` matches ``Secret("s3cret")``; ``b"s3cret"`` and ``b"Basic ..."``
    do not."""
    if not header:
        return False
    scheme, _, value = header.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not value.strip():
        return False
    return hmac.compare_digest(value.strip(), token.reveal().encode())


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
    """Require ``Authorization: Bearer <token>`` on every HTTP path but ``open_paths``."""

    def __init__(self, app: ASGIApp, token: Secret, open_paths: Collection[str]) -> None:
        self.app = app
        self._token = token
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self.app(scope, receive, send)
            return
        header = next(
            (value for name, value in scope["headers"] if name.lower() == b"authorization"), None
        )
        if token_matches(header, self._token):
            await self.app(scope, receive, send)
            return
        await _send_json(send, 401, UNAUTHORIZED, [(b"www-authenticate", b"Bearer")])


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
