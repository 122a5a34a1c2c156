"""The Web API stand-in's channel page, its server side: what it sends to the app as Slack, and
the channel it hands the page, against a real HTTP app that checks Slack's signature."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient

from bot.errors import InputError
from bot.testing import SlackApiStandIn
from bot.testing.web_channel import ChannelPage, Person

SECRET = "0c4f1e2d3b5a69788796a5b4c3d2e1f0"
ANA, EVE = Person("U0ANA", "ana", "may apply"), Person("U0EVE", "eve", "may not apply")


@dataclass
class RecordingApp:
    """An app in HTTP mode: keeps what reached it and whether Slack's signature held."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    verifier: SignatureVerifier = field(default_factory=lambda: SignatureVerifier(SECRET))


@pytest.fixture
def app() -> Iterator[RecordingApp]:
    """A real HTTP server standing for the app's Request URL, verifying each signature with the
    Slack SDK's own verifier."""
    recorder = RecordingApp()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            signed = recorder.verifier.is_valid_request(raw, headers)
            fields = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
            recorder.received.append({"signed": signed, "fields": fields})
            self.send_response(200 if signed else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}/slack/events"
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def slack(app: RecordingApp) -> Iterator[SlackApiStandIn]:
    """The stand-in with its channel page, acting as Slack towards ``app``."""
    with SlackApiStandIn() as stand_in:
        stand_in.open_channel_page(ChannelPage(app.url, SECRET, (ANA, EVE)))
        yield stand_in


def test_a_typed_command_reaches_the_app_as_a_signed_slash_command(
    slack: SlackApiStandIn, app: RecordingApp
) -> None:
    """Typing /kimi status as eve posts a slash command Slack's verifier accepts, as eve, in
    the page's channel, with a response_url on the stand-in."""
    answer = httpx.post(f"{slack.origin}/ui/command", json={"user": EVE.id, "text": "status"})
    assert answer.json() == {"ok": True, "app_status": 200}
    [request] = app.received
    assert request["signed"] is True
    fields = request["fields"]
    assert (fields["command"], fields["text"], fields["user_id"], fields["channel_id"]) == (
        "/kimi",
        "status",
        EVE.id,
        "C0OPS",
    )
    assert fields["response_url"].startswith(f"{slack.origin}/response/")


def test_a_reply_to_the_response_url_is_shown_to_its_sender_only(
    slack: SlackApiStandIn, app: RecordingApp
) -> None:
    """An ephemeral reply to a command's response_url is in the sender's view of the channel,
    not in the channel's history nor in another person's view."""
    assert slack.page is not None
    slack.page.command(EVE.id, "resize ratio 4")
    url = app.received[0]["fields"]["response_url"]
    sent = WebhookClient(url).send(text="you may not apply", response_type="ephemeral")
    assert sent.status_code == 200
    eve = httpx.get(f"{slack.origin}/ui/state", params={"user": EVE.id}).json()
    ana = httpx.get(f"{slack.origin}/ui/state", params={"user": ANA.id}).json()
    assert [e["text"] for e in eve["ephemerals"]] == ["you may not apply"]
    assert ana["ephemerals"] == []
    assert eve["messages"] == []


def test_post_ephemeral_is_kept_for_its_user(slack: SlackApiStandIn) -> None:
    """chat.postEphemeral's reply is in that user's view, with its blocks."""
    client = WebClient(token=slack.bot_token, base_url=slack.url)
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*no*"}}]
    client.chat_postEphemeral(channel="C0OPS", user=ANA.id, text="no", blocks=blocks)
    view = httpx.get(f"{slack.origin}/ui/state", params={"user": ANA.id}).json()
    assert [(e["text"], e["blocks"]) for e in view["ephemerals"]] == [("no", blocks)]


def test_a_click_reaches_the_app_as_a_signed_block_actions_payload(
    slack: SlackApiStandIn, app: RecordingApp
) -> None:
    """A click on a message's button posts a block_actions payload naming the person, the
    message, the action and its value, signed."""
    client = WebClient(token=slack.bot_token, base_url=slack.url)
    ts = client.chat_postMessage(channel="C0OPS", text="Proposal #4")["ts"]
    click = {"user": ANA.id, "ts": ts, "action_id": "kimi_apply", "value": "4"}
    answer = httpx.post(f"{slack.origin}/ui/click", json=click)
    assert answer.json()["ok"] is True
    [request] = app.received
    assert request["signed"] is True
    payload = json.loads(request["fields"]["payload"])
    assert payload["type"] == "block_actions"
    assert payload["user"]["id"] == ANA.id
    assert payload["container"]["message_ts"] == ts
    assert [(a["action_id"], a["value"]) for a in payload["actions"]] == [("kimi_apply", "4")]


@pytest.mark.parametrize(
    ("route", "body", "error"),
    [
        ("command", {"user": "U0NOBODY", "text": "status"}, "not one of the page's people"),
        ("command", {"user": EVE.id}, "'text' is missing"),
        ("command", {"user": EVE.id, "text": "x" * 10_001}, "over Slack's limit"),
        ("click", {"user": ANA.id, "ts": "1.2", "action_id": "a", "value": "1"}, "no message"),
        ("nothing", {"user": ANA.id}, "no route"),
    ],
)
def test_bad_input_from_the_page_is_refused_and_sends_nothing(
    slack: SlackApiStandIn, app: RecordingApp, route: str, body: dict[str, Any], error: str
) -> None:
    """A command or click the page cannot make gets a 4xx naming the problem, and nothing
    reaches the app."""
    answer = httpx.post(f"{slack.origin}/ui/{route}", json=body)
    assert answer.status_code in (400, 404)
    assert error in answer.json()["error"]
    assert app.received == []


def test_a_body_that_is_not_a_json_object_is_refused(
    slack: SlackApiStandIn, app: RecordingApp
) -> None:
    """Text that is not JSON, or JSON that is not an object, is a 400; nothing is sent."""
    for raw in (b"not json", b"[1, 2]"):
        answer = httpx.post(f"{slack.origin}/ui/command", content=raw)
        assert answer.status_code == 400
    assert app.received == []


def test_the_state_shows_edits_threads_and_files(slack: SlackApiStandIn) -> None:
    """The channel as the page gets it: a message's edits counted, its reply counted and kept
    under it, and an uploaded PNG served back from /files."""
    client = WebClient(token=slack.bot_token, base_url=slack.url)
    ts = client.chat_postMessage(channel="C0OPS", text="starting")["ts"]
    client.chat_update(channel="C0OPS", ts=ts, text="ready")
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
    client.files_upload_v2(
        content=png, filename="c.png", title="chart", channel="C0OPS", thread_ts=ts
    )
    view = httpx.get(f"{slack.origin}/ui/state", params={"user": ANA.id}).json()
    parent, reply = view["messages"]
    assert (parent["text"], parent["edits"], parent["reply_count"]) == ("ready", 1, 1)
    assert reply["thread_ts"] == ts
    [shared] = reply["files"]
    assert shared["image"] is True
    served = httpx.get(f"{slack.origin}{shared['url']}")
    assert served.content == png
    assert served.headers["content-type"] == "image/png"


def test_the_event_stream_says_changed_when_a_message_lands(slack: SlackApiStandIn) -> None:
    """The page's event stream names a new version once a message is posted, so the page
    redraws without polling."""
    client = WebClient(token=slack.bot_token, base_url=slack.url)
    versions: list[int] = []
    with httpx.stream("GET", f"{slack.origin}/ui/events", timeout=10) as stream:
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                versions.append(int(line[len("data: ") :]))
                break
        client.chat_postMessage(channel="C0OPS", text="hello")
        started = time.monotonic()
        for line in lines:
            if line.startswith("data: "):
                versions.append(int(line[len("data: ") :]))
                break
            assert time.monotonic() - started < 10
    assert versions[1] > versions[0]


def test_the_page_and_its_assets_are_served_from_the_package(slack: SlackApiStandIn) -> None:
    """The page, its script and its style come from the stand-in itself and load nothing from
    another host (every src and href, fetch and event stream is a path on the stand-in; the
    style imports nothing), so it works offline; an unknown path is a 404."""
    page = httpx.get(f"{slack.origin}/")
    script = httpx.get(f"{slack.origin}/static/channel.js")
    style = httpx.get(f"{slack.origin}/static/channel.css")
    assert [r.status_code for r in (page, script, style)] == [200, 200, 200]
    assert page.headers["content-type"].startswith("text/html")
    assert script.headers["content-type"].startswith("text/javascript")
    links = re.findall(r'(?:src|href)="([^"]*)"', page.text)
    assert links
    assert all(link.startswith("/") for link in links), links
    loads = re.findall(r"(?:fetch|EventSource)\(\s*([`'\"].)", script.text)
    assert loads
    assert all(load[1] == "/" for load in loads), loads
    assert "import " not in script.text
    assert "url(" not in style.text
    assert "@import" not in style.text
    assert httpx.get(f"{slack.origin}/static/secrets.txt").status_code == 404


def test_a_page_without_people_is_refused() -> None:
    """A channel page with nobody to act as cannot be opened."""
    with pytest.raises(InputError, match="at least one person"):
        ChannelPage("http://127.0.0.1:1/slack/events", SECRET, ())
