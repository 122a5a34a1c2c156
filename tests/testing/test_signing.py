"""Signed requests pass slack_sdk's SignatureVerifier and Bolt's check; bad ones are refused."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

import pytest
from slack_bolt import Ack, App, BoltRequest
from slack_sdk import WebClient
from slack_sdk.signature import Clock, SignatureVerifier

from bot.errors import InputError
from bot.testing import REPLAY_WINDOW_S, SignedRequest, SlackApiStandIn, SlackRequestSigner
from bot.testing import slack_signature as sign

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
NOW = 1_767_000_000.0


class FixedClock(Clock):
    """slack_sdk's clock seam, held at one instant."""

    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def _verifier(secret: str = SECRET) -> SignatureVerifier:
    return SignatureVerifier(secret, clock=FixedClock(NOW))


def _valid(request: SignedRequest, verifier: SignatureVerifier | None = None) -> bool:
    return (verifier or _verifier()).is_valid_request(request.body, request.headers)


def test_slacks_documented_example_signature_is_reproduced() -> None:
    """The signature of Slack's published example request is the one Slack's docs print."""
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow"
        b"&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner"
        b"&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands"
        b"%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
        b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )
    assert sign(SECRET, 1531420618, body) == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    )


def test_a_signed_slash_command_passes_the_sdk_verifier() -> None:
    """A slash command signed now is a valid request to slack_sdk's SignatureVerifier."""
    signer = SlackRequestSigner(SECRET, clock=lambda: NOW)
    request = signer.slash_command("status", response_url="http://127.0.0.1:1/response/1")
    assert _valid(request)
    fields = parse_qs(request.body.decode())
    assert (fields["command"], fields["text"]) == (["/kimi"], ["status"])
    assert request.headers["X-Slack-Request-Timestamp"] == str(int(NOW))


def test_an_interactive_request_carries_json_in_the_payload_field() -> None:
    """interactive() posts payload=<JSON> as a form and signs it validly."""
    signer = SlackRequestSigner(SECRET, clock=lambda: NOW)
    request = signer.interactive({"type": "block_actions", "actions": []})
    assert _valid(request)
    (payload,) = parse_qs(request.body.decode())["payload"]
    assert json.loads(payload) == {"type": "block_actions", "actions": []}


@pytest.mark.parametrize(
    ("tamper", "valid"),
    [
        (lambda r: r.unsigned(), False),
        (lambda r: r.signed_with("another-secret"), False),
        (lambda r: SignedRequest(r.body + b"&x=1", r.timestamp, r.signature), False),
        (lambda r: r, True),
    ],
    ids=["unsigned", "wrong-secret", "body-changed", "untouched"],
)
def test_tampered_requests_are_rejected_by_the_sdk_verifier(tamper: Any, valid: bool) -> None:
    """Unsigned, wrongly signed and altered requests fail verification; the original passes."""
    signer = SlackRequestSigner(SECRET, clock=lambda: NOW)
    request = signer.slash_command("status", response_url="http://127.0.0.1:1/response/1")
    assert _valid(tamper(request)) is valid


@pytest.mark.parametrize(
    ("age_s", "valid"), [(REPLAY_WINDOW_S, True), (REPLAY_WINDOW_S + 1, False), (3600, False)]
)
def test_requests_older_than_five_minutes_are_replays(age_s: float, valid: bool) -> None:
    """A request signed 300 s ago still passes; 301 s or more is refused as a replay."""
    signer = SlackRequestSigner(SECRET, clock=lambda: NOW)
    request = signer.slash_command("status", response_url="http://x/1", age_s=age_s)
    assert request.timestamp == int(NOW - age_s)
    assert _valid(request) is valid


def test_an_empty_secret_is_refused() -> None:
    """A signer without a secret is refused rather than signing with an empty key."""
    with pytest.raises(InputError, match="signing secret is empty"):
        SlackRequestSigner("")


def _http_app(slack: SlackApiStandIn, seen: list[str]) -> App:
    app = App(
        signing_secret=SECRET,
        client=WebClient(token=slack.bot_token, base_url=slack.url),
        token_verification_enabled=False,
    )

    @app.command("/kimi")
    def kimi(ack: Ack, command: dict[str, Any]) -> None:
        ack()
        seen.append(command["text"])

    return app


def _dispatch(app: App, request: SignedRequest) -> int:
    response = app.dispatch(BoltRequest(body=request.body.decode(), headers=request.headers))
    return int(response.status)


@pytest.mark.parametrize(
    ("make", "status", "handled"),
    [
        (lambda s, url: s.slash_command("status", response_url=url), 200, ["status"]),
        (lambda s, url: s.slash_command("status", response_url=url).unsigned(), 401, []),
        (lambda s, url: s.slash_command("a", response_url=url).signed_with("x"), 401, []),
        (lambda s, url: s.slash_command("a", response_url=url, age_s=301), 401, []),
    ],
    ids=["signed", "unsigned", "wrong-secret", "replayed"],
)
def test_bolt_in_http_mode_handles_signed_requests_and_refuses_the_rest(
    slack: SlackApiStandIn, make: Any, status: int, handled: list[str]
) -> None:
    """Bolt's own check accepts the signed command and answers 401 to the others, unhandled."""
    seen: list[str] = []
    app = _http_app(slack, seen)
    request = make(SlackRequestSigner(SECRET), slack.new_response_url())
    assert _dispatch(app, request) == status
    assert seen == handled
