"""Slack-signed HTTP requests for an app in HTTP mode: slash commands and interactivity.

Slack signs each request with the app's signing secret: ``X-Slack-Request-Timestamp`` is the
Unix time, ``X-Slack-Signature`` is ``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{raw body}``,
and an app refuses a request whose timestamp is more than 300 s from its own clock. The clock
is injectable, so a test can build a replayed request by signing it in the past; ``unsigned()``
and ``signed_with(other_secret)`` give the other two requests an app must refuse.

It replaces Slack's outbound request to the app's Request URL; it does not send anything (post
``body`` with ``headers`` through the test's own HTTP client).

Usage::

    signer = SlackRequestSigner("8f742231b10e8888abcd99yyyzzz85a5")
    request = signer.slash_command("status", response_url=slack.new_response_url())
    httpx.post(app_url + "/slack/events", content=request.body, headers=request.headers)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from bot.errors import InputError
from bot.testing._payloads import slash_command_payload

__all__ = ["REPLAY_WINDOW_S", "SignedRequest", "SlackRequestSigner", "slack_signature"]

REPLAY_WINDOW_S = 300  # Slack's apps refuse a request signed further than this from now

FORM = "application/x-www-form-urlencoded"


def slack_signature(signing_secret: str, timestamp: int, body: bytes) -> str:
    """``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}`` under ``signing_secret``."""
    base = b"v0:" + str(timestamp).encode() + b":" + body
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class SignedRequest:
    """A request body and the headers Slack would send with it."""

    body: bytes
    timestamp: int
    signature: str | None
    content_type: str = FORM

    @property
    def headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": self.content_type,
            "X-Slack-Request-Timestamp": str(self.timestamp),
        }
        if self.signature is not None:
            headers["X-Slack-Signature"] = self.signature
        return headers

    def unsigned(self) -> SignedRequest:
        """The same request without ``X-Slack-Signature``."""
        return replace(self, signature=None)

    def signed_with(self, signing_secret: str) -> SignedRequest:
        """The same request signed with another secret (a forgery, to an app with the first)."""
        return replace(self, signature=slack_signature(signing_secret, self.timestamp, self.body))


class SlackRequestSigner:
    """Builds signed requests with ``signing_secret``; ``clock`` gives the Unix time."""

    def __init__(self, signing_secret: str, *, clock: Callable[[], float] = time.time) -> None:
        if not signing_secret:
            raise InputError("signing secret is empty; pass the one the app under test verifies")
        self._secret = signing_secret
        self._clock = clock

    def sign(self, body: bytes, *, age_s: float = 0.0, content_type: str = FORM) -> SignedRequest:
        """Sign ``body`` as sent ``age_s`` seconds ago (over ``REPLAY_WINDOW_S``: a replay)."""
        timestamp = int(self._clock() - age_s)
        signature = slack_signature(self._secret, timestamp, body)
        return SignedRequest(body, timestamp, signature, content_type)

    def form(self, fields: Mapping[str, str], *, age_s: float = 0.0) -> SignedRequest:
        """A signed URL-encoded form body, as Slack posts slash commands."""
        return self.sign(urlencode(fields).encode(), age_s=age_s)

    def slash_command(
        self,
        text: str,
        *,
        response_url: str,
        user_id: str = "U0ALICE",
        channel_id: str = "C0OPS",
        command: str = "/kimi",
        age_s: float = 0.0,
    ) -> SignedRequest:
        """A signed slash command ``{command} {text}`` whose replies go to ``response_url``."""
        fields = slash_command_payload(
            command=command,
            text=text,
            user_id=user_id,
            channel_id=channel_id,
            response_url=response_url,
        )
        return self.form(fields, age_s=age_s)

    def interactive(self, payload: Mapping[str, Any], *, age_s: float = 0.0) -> SignedRequest:
        """A signed interactivity request: the form field ``payload`` holding JSON."""
        return self.form({"payload": json.dumps(payload)}, age_s=age_s)
