"""The Slack stand-in's channel page: a Slack channel in a browser, for the demo and its tests.

The page (``bot/testing/web/``: one HTML file, its script and style, nothing fetched from
elsewhere) draws one channel of the stand-in as Slack's client would: every message the app
posted, edited in place, its thread replies, the files it uploaded, and the ephemeral replies the
person chosen in the page's user switcher was shown. What the person types in the composer is
sent to the app as Slack sends it, a slash command signed with the app's signing secret, and a
click on a button is a signed ``block_actions`` payload: the app cannot tell the page from Slack.

Routes, all on the stand-in's own port (127.0.0.1 only)::

    GET  /                       the page
    GET  /static/<file>          its script and style
    GET  /ui/state?user=U0ANA    the channel as JSON, with that person's ephemeral replies
    GET  /ui/events              server-sent events: "changed" each time the channel changes
    GET  /files/<id>             an uploaded file's bytes (the report's PNG)
    POST /ui/command             {"user": "U0BEN", "text": "resize ratio 4"}
    POST /ui/click               {"user": "U0ANA", "ts": "...", "action_id": "...", ...}

Usage::

    with SlackApiStandIn() as slack:
        page = slack.open_channel_page(ChannelPage(app_url, secret, people))
        page.command("U0BEN", "resize ratio 4")   # what typing it in the page does
        print(slack.origin)                         # open it in a browser
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import httpx

from bot.errors import InputError
from bot.testing._channels import ChannelStore, StoredEphemeral, StoredMessage
from bot.testing._methods import BOT_USER_ID, Upload
from bot.testing._payloads import block_actions_payload
from bot.testing.signing import SlackRequestSigner

__all__ = ["DEFAULT_CHANNEL", "ChannelPage", "Person", "WebChannel"]

DEFAULT_CHANNEL = "C0OPS"
_STATIC = ("channel.js", "channel.css")
_MAX_COMMAND_CHARS = 10_000  # what Slack's composer lets through (a 10 kB text is refused)


@dataclass(frozen=True)
class Person:
    """Someone the page can act as: a Slack user id, the name shown, and their role in words."""

    id: str
    name: str
    role: str


@dataclass(frozen=True)
class ChannelPage:
    """What the page needs to stand for Slack towards an app in HTTP mode: the app's Request
    URL, its signing secret, the people to act as and the channel to show."""

    app_url: str
    signing_secret: str
    people: tuple[Person, ...]
    channel: str = DEFAULT_CHANNEL
    channel_name: str = "ops"
    app_name: str = "kimi-ops"

    def __post_init__(self) -> None:
        if not self.people:
            raise InputError("the channel page needs at least one person to act as")


class WebChannel:
    """The page's server side: the channel as JSON, and commands and clicks sent to the app."""

    def __init__(
        self,
        page: ChannelPage,
        channels: ChannelStore,
        uploads: Callable[[str], Upload | None],
        new_response_url: Callable[[str, str], str],
    ) -> None:
        self.page = page
        self._channels = channels
        self._uploads = uploads
        self._new_response_url = new_response_url
        self._signer = SlackRequestSigner(page.signing_secret)
        self._people = {person.id: person for person in page.people}

    # -- acting as Slack -------------------------------------------------------------------

    def command(self, user: str, text: str) -> int:
        """Send ``/kimi text`` as ``user``, signed as Slack signs it; the app's HTTP status."""
        person = self._person(user)
        if len(text) > _MAX_COMMAND_CHARS:
            raise InputError(f"a command of {len(text):,} characters is over Slack's limit")
        request = self._signer.slash_command(
            text,
            response_url=self._new_response_url(self.page.channel, person.id),
            user_id=person.id,
            channel_id=self.page.channel,
        )
        return self._send(request.body, request.headers)

    def click(self, user: str, ts: str, action_id: str, value: str, block_id: str = "") -> int:
        """Click the button ``action_id`` of the message ``ts`` as ``user``; the app's status."""
        person = self._person(user)
        if self._channels.message(self.page.channel, ts) is None:
            raise InputError(f"there is no message {ts!r} in the channel to click on")
        payload = block_actions_payload(
            user_id=person.id,
            channel_id=self.page.channel,
            message_ts=ts,
            action_id=action_id,
            value=value,
            block_id=block_id,
            response_url=self._new_response_url(self.page.channel, person.id),
        )
        request = self._signer.interactive(payload)
        return self._send(request.body, request.headers)

    def _send(self, body: bytes, headers: Mapping[str, str]) -> int:
        try:
            answer = httpx.post(self.page.app_url, content=body, headers=dict(headers), timeout=10)
        except httpx.HTTPError as exc:
            raise InputError(f"the app at {self.page.app_url} did not answer: {exc}") from exc
        return answer.status_code

    def _person(self, user: str) -> Person:
        person = self._people.get(user)
        if person is None:
            known = ", ".join(self._people)
            raise InputError(f"user {user!r} is not one of the page's people ({known})")
        return person

    # -- what the page draws ---------------------------------------------------------------

    def state(self, user: str) -> dict[str, Any]:
        """The channel as the page draws it for ``user``: people, messages, their replies."""
        person = self._person(user)
        channel = self.page.channel
        messages = self._channels.history(channel)
        replies: dict[str, int] = {}
        for message in messages:
            if message.thread_ts is not None and message.thread_ts != message.ts:
                replies[message.thread_ts] = replies.get(message.thread_ts, 0) + 1
        return {
            "version": self._channels.version,
            "channel": {"id": channel, "name": self.page.channel_name},
            "app": {"id": BOT_USER_ID, "name": self.page.app_name},
            "me": person.id,
            "people": [{"id": p.id, "name": p.name, "role": p.role} for p in self.page.people],
            "messages": [self._message_json(m, replies.get(m.ts, 0)) for m in messages],
            "ephemerals": [
                _ephemeral_json(e) for e in self._channels.ephemerals(channel, person.id)
            ],
        }

    def _message_json(self, message: StoredMessage, reply_count: int) -> dict[str, Any]:
        files = []
        for file_id in message.files:
            upload = self._uploads(file_id)
            if upload is None:
                continue
            files.append(
                {
                    "id": file_id,
                    "title": upload.title or upload.filename,
                    "url": f"/files/{file_id}",
                    "image": (mimetypes.guess_type(upload.filename)[0] or "").startswith("image/"),
                }
            )
        return {
            "ts": message.ts,
            "text": message.text,
            "blocks": list(message.blocks),
            "thread_ts": message.thread_ts,
            "edits": message.edits,
            "seq": message.seq,
            "files": files,
            "reply_count": reply_count,
        }

    def file(self, file_id: str) -> tuple[str, bytes] | None:
        """(content type, bytes) of an uploaded file, or None if there is none by that id."""
        upload = self._uploads(file_id)
        if upload is None or upload.data is None:
            return None
        return mimetypes.guess_type(upload.filename)[0] or "application/octet-stream", upload.data

    def wait_for_change(self, since: int, timeout: float) -> int:
        return self._channels.wait_for_change(since, timeout)

    # -- HTTP ------------------------------------------------------------------------------

    def asset(self, name: str) -> tuple[str, bytes] | None:
        """(content type, bytes) of the page (``""``) or one of its static files."""
        if name == "":
            name = "index.html"
        elif name not in _STATIC:
            return None
        data = resources.files("bot.testing").joinpath("web", name).read_bytes()
        kind = {"html": "text/html", "js": "text/javascript", "css": "text/css"}
        return f"{kind[name.rsplit('.', 1)[1]]}; charset=utf-8", data

    def post(self, route: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        """A POST from the page: ``command`` or ``click``; (status, JSON answer)."""
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise InputError("the body must be a JSON object")
            user = _field(body, "user")
            if route == "command":
                status = self.command(user, _field(body, "text"))
            elif route == "click":
                status = self.click(
                    user,
                    _field(body, "ts"),
                    _field(body, "action_id"),
                    _field(body, "value"),
                    str(body.get("block_id") or ""),
                )
            else:
                return 404, {"ok": False, "error": f"no route /ui/{route}"}
        except (InputError, json.JSONDecodeError) as exc:
            return 400, {"ok": False, "error": str(exc)}
        return 200, {"ok": status == 200, "app_status": status}


def _field(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InputError(f"{name!r} is missing or not a non-empty string")
    return value


def _ephemeral_json(reply: StoredEphemeral) -> dict[str, Any]:
    return {"seq": reply.seq, "text": reply.text, "blocks": list(reply.blocks)}
