"""A local stand-in for Slack's Web API, for tests, the demo and benchmarks.

It replaces ``https://slack.com/api/`` for a ``slack_sdk.WebClient(base_url=stand_in.url)``: it
binds 127.0.0.1 on a free port, records every request (method, parsed JSON or form body,
headers, bearer token, arrival time), keeps the current text and blocks of every message it was
sent, and answers ``auth.test``, ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral``,
``apps.connections.open`` (with the attached Socket Mode stand-in's ``ws://`` URL), the
``files_upload_v2`` sequence (``files.getUploadURLExternal``, the upload POST to a URL on
itself, ``files.completeUploadExternal``), ``usergroups.users.list`` (members set by the test
with ``set_usergroup``; any other group is ``no_such_subteam``), and posts to
``response_url``\\ s it hands out.

It can be told to fail: 429 with ``Retry-After`` and ``{"ok": false, "error": "ratelimited"}``,
or 500, for the next N calls or a seeded share of calls per method (``stand_in.faults``).

It does not do: OAuth, scopes, channel membership, users (beyond user groups' members), Block Kit
validation, message length limits, or the per-method rate limits themselves (inject them with
``faults``). A token is good when it is the bot token (``xoxb-``) or, for
``apps.connections.open`` only, the app token (``xapp-``) it was built with.

Usage::

    with SlackApiStandIn() as slack:
        client = WebClient(token=slack.bot_token, base_url=slack.url)
        ts = client.chat_postMessage(channel="C1", text="hi")["ts"]
        assert slack.message("C1", ts).text == "hi"

Run alone with ``python -m bot.testing.slack_api --port 0``; it prints its base URL.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from bot.errors import InputError
from bot.testing._background import BackgroundServer
from bot.testing._bodies import BodyError, parse_body
from bot.testing._channels import ChannelStore, StoredEphemeral, StoredMessage
from bot.testing._faults import FaultPlan
from bot.testing._methods import METHODS_FOR_APP_TOKEN, Upload, WebApiMethods
from bot.testing._records import CallLog, RecordedCall, request_token
from bot.testing.web_channel import ChannelPage, WebChannel

__all__ = ["RESPONSE_URL_LIMIT", "RESPONSE_URL_WINDOW_S", "ResponsePost", "SlackApiStandIn"]

RESPONSE_URL_LIMIT = 5  # posts Slack accepts per response_url ...
RESPONSE_URL_WINDOW_S = 30 * 60  # ... within this many seconds of the command


@dataclass(frozen=True)
class ResponsePost:
    """One post to a ``response_url``: its JSON body and whether the stand-in accepted it."""

    url: str
    body: dict[str, Any]
    accepted: bool
    at: float


class SlackApiStandIn(BackgroundServer):
    """Slack's Web API on 127.0.0.1, in a background thread; see the module docstring."""

    def __init__(
        self,
        *,
        bot_token: str = "xoxb-kimi-ops-test",
        app_token: str = "xapp-kimi-ops-test",
        port: int = 0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.bot_token = bot_token
        self.app_token = app_token
        self.faults = FaultPlan()
        self._log = CallLog()
        self._channels = ChannelStore()
        self._monotonic = monotonic
        self._methods = WebApiMethods(self._channels, lambda: self.origin)
        self._response_lock = threading.Lock()
        self._response_ids = itertools.count(1)
        self._response_posts: dict[str, list[ResponsePost]] = {}
        self._response_senders: dict[str, tuple[str, str]] = {}
        self.page: WebChannel | None = None
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True

    # -- lifecycle -------------------------------------------------------------------------

    _thread_name = "slack-api-stand-in"

    def _serve(self) -> None:
        # A short poll keeps stop() quick: shutdown waits for the loop's next poll.
        self._server.serve_forever(poll_interval=0.05)

    def _shutdown(self) -> None:
        self._server.shutdown()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (for ``python -m``)."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def stop(self) -> None:
        self._stopping.set()  # ends the channel page's event streams
        super().stop()
        self._server.server_close()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def url(self) -> str:
        """The base URL to give ``WebClient(base_url=...)`` (ends with ``/api/``)."""
        return f"{self.origin}/api/"

    # -- what a test reads ----------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[RecordedCall]:
        """Every call so far (to ``method`` only, when given), in arrival order."""
        return self._log.calls(method)

    def wait_for(
        self, predicate: Callable[[list[RecordedCall]], bool], timeout: float = 5.0
    ) -> list[RecordedCall]:
        """Block until ``predicate`` holds over all calls so far; raise TimeoutError if not."""
        return self._log.wait_for(predicate, timeout)

    def message(self, channel: str, ts: str) -> StoredMessage | None:
        """The message as it reads now, or None if ``ts`` was never posted in ``channel``."""
        return self._channels.message(channel, ts)

    def history(self, channel: str) -> list[StoredMessage]:
        """Every message of ``channel`` including thread replies, oldest first."""
        return self._channels.history(channel)

    def ephemerals(self, channel: str, user: str) -> list[StoredEphemeral]:
        """The ephemeral replies ``user`` was shown in ``channel``, oldest first."""
        return self._channels.ephemerals(channel, user)

    def replies(self, channel: str, thread_ts: str) -> list[StoredMessage]:
        """The replies under ``thread_ts``, oldest first."""
        return self._channels.replies(channel, thread_ts)

    def upload(self, file_id: str) -> Upload | None:
        """A file from ``files_upload_v2`` with its bytes, title, channel and thread."""
        return self._methods.uploads.get(file_id)

    # -- the workspace --------------------------------------------------------------------

    def set_usergroup(self, group: str, users: tuple[str, ...]) -> None:
        """Make ``group`` (an id such as ``S0ONCALL``) exist with ``users`` as its members, as
        ``usergroups.users.list`` answers from now on."""
        self._methods.set_usergroup(group, tuple(users))

    # -- response_url ---------------------------------------------------------------------

    def new_response_url(self, *, channel: str | None = None, user: str | None = None) -> str:
        """A fresh ``response_url`` on this stand-in, as Slack puts in a slash command.

        Given the ``channel`` and ``user`` the command came from, an ephemeral post to it is
        kept as a reply only that user sees (what the channel page draws), and an
        ``in_channel`` one is posted in the channel, as Slack does."""
        with self._response_lock:
            url = f"{self.origin}/response/{next(self._response_ids)}"
            self._response_posts[url] = []
            if channel is not None and user is not None:
                self._response_senders[url] = (channel, user)
            return url

    def response_posts(self, url: str) -> list[ResponsePost]:
        """What was posted to ``url``, accepted or refused, oldest first."""
        with self._response_lock:
            return list(self._response_posts.get(url, []))

    def _post_to_response_url(self, url: str, body: dict[str, Any]) -> ResponsePost | None:
        now = self._monotonic()
        with self._response_lock:
            posts = self._response_posts.get(url)
            if posts is None:
                return None
            recent = [p for p in posts if p.accepted and now - p.at < RESPONSE_URL_WINDOW_S]
            post = ResponsePost(url, body, len(recent) < RESPONSE_URL_LIMIT, now)
            posts.append(post)
            sender = self._response_senders.get(url)
        if post.accepted and sender is not None:
            self._show_response(sender, body)
        return post

    def _show_response(self, sender: tuple[str, str], body: dict[str, Any]) -> None:
        channel, user = sender
        text = str(body.get("text") or "")
        blocks = body.get("blocks")
        blocks = blocks if isinstance(blocks, list) else None
        if body.get("response_type") == "in_channel":
            self._channels.post(channel, text, blocks, None)
        else:
            self._channels.post_ephemeral(channel, user, text, blocks)

    # -- the channel page -----------------------------------------------------------------

    def open_channel_page(self, page: ChannelPage) -> WebChannel:
        """Serve the channel page (:mod:`bot.testing.web_channel`) on this stand-in's port,
        acting as Slack towards the app at ``page.app_url``."""
        self.page = WebChannel(
            page,
            self._channels,
            self.upload,
            lambda channel, user: self.new_response_url(channel=channel, user=user),
        )
        return self.page

    # -- Socket Mode ----------------------------------------------------------------------

    def attach_socket_mode(self, issue_url: Callable[[], str] | None) -> None:
        """Let ``apps.connections.open`` answer with URLs from ``issue_url`` (None detaches)."""
        self._methods.socket_mode_url = issue_url

    # -- request handling (server threads) ------------------------------------------------

    def _handle_api(
        self, method: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        if not self._methods.knows(method):
            return 200, {}, {"ok": False, "error": "unknown_method", "req_method": method}
        try:
            fields = parse_body(headers.get("content-type", ""), raw).fields
        except BodyError as exc:
            return 200, {}, {"ok": False, "error": exc.code}
        token_error = self._token_error(method, headers, fields)
        if token_error is not None:
            return 200, {}, {"ok": False, "error": token_error}
        fault = self.faults.draw(method)
        if fault is not None and fault.status == 429:
            retry = {"Retry-After": str(fault.retry_after)}
            return 429, retry, {"ok": False, "error": "ratelimited"}
        if fault is not None:
            return fault.status, {}, {"ok": False, "error": "internal_error"}
        return 200, {}, self._methods.answer(method, fields)

    def _token_error(
        self, method: str, headers: dict[str, str], fields: dict[str, Any]
    ) -> str | None:
        token = request_token(headers, fields)
        if token is None:
            return "not_authed"
        expected = self.app_token if method in METHODS_FOR_APP_TOKEN else self.bot_token
        if token == expected:
            return None
        if token in (self.app_token, self.bot_token):
            return "not_allowed_token_type"
        return "invalid_auth"


def _handler_for(stand_in: SlackApiStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: with Nagle's algorithm the body waits
        # for the client's delayed ACK (~40 ms), which Slack never makes a caller wait.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            page = stand_in.page
            path, _, query = self.path.partition("?")
            if page is None:
                self._send(404, "text/plain", b"no channel page on this stand-in")
            elif path == "/ui/events":
                self._events(page)
            elif path == "/ui/state":
                user = parse_qs(query).get("user", [page.page.people[0].id])[0]
                try:
                    self._json(200, page.state(user))
                except InputError as exc:
                    self._json(400, {"ok": False, "error": str(exc)})
            elif path.startswith("/files/"):
                found = page.file(path[len("/files/") :])
                if found is None:
                    self._send(404, "text/plain", b"no such file")
                else:
                    self._send(200, *found)
            else:
                asset = page.asset(path.removeprefix("/static/").removeprefix("/"))
                if asset is None:
                    self._send(404, "text/plain", b"not found")
                else:
                    self._send(200, *asset)

        def _events(self, page: WebChannel) -> None:
            """Server-sent events: ``changed`` at once, then each time the channel changes; a
            comment every 15 s keeps proxies from closing a quiet stream."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            version = -1
            quiet = 0.0
            try:
                while not stand_in._stopping.is_set():
                    seen = page.wait_for_change(version, 0.5)
                    if seen != version:
                        version, quiet = seen, 0.0
                        self.wfile.write(f"event: changed\ndata: {version}\n\n".encode())
                        self.wfile.flush()
                    else:
                        quiet += 0.5
                        if quiet >= 15:
                            quiet = 0.0
                            self.wfile.write(b": quiet\n\n")
                            self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return  # the page was closed
            self.close_connection = True

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, answer: dict[str, Any]) -> None:
            self._send(status, "application/json; charset=utf-8", json.dumps(answer).encode())

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = self.path.split("?", 1)[0]
            if path.startswith("/ui/") and stand_in.page is not None:
                # The page's own requests are not Web API calls: not recorded as calls.
                self._json(*stand_in.page.post(path[len("/ui/") :], raw))
                return
            if path.startswith("/api/"):
                method = path[len("/api/") :]
                status, extra, answer = stand_in._handle_api(method, headers, raw)
            elif path.startswith("/upload/"):
                method, extra = "upload", {}
                status, answer = self._upload(path[len("/upload/") :], headers, raw)
            elif path.startswith("/response/"):
                method, extra = "response_url", {}
                status, answer = self._response(headers, raw)
            else:
                method, status, extra, answer = "unknown", 404, {}, {"ok": False}
            try:
                fields = parse_body(headers.get("content-type", ""), raw).fields
            except BodyError:
                fields = {}
            # Recorded before answering, so a test that got the answer finds the call logged.
            stand_in._log.append(
                RecordedCall(
                    method, path, headers, fields, raw, status, answer, stand_in._monotonic()
                )
            )
            body = json.dumps(answer).encode()
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _upload(
            self, file_id: str, headers: dict[str, str], raw: bytes
        ) -> tuple[int, dict[str, Any]]:
            content_type = headers.get("content-type", "")
            data = raw
            if content_type.startswith("multipart/form-data"):
                try:
                    files = parse_body(content_type, raw).files
                except BodyError:
                    return 400, {"ok": False, "error": "invalid_form_data"}
                data = next(iter(files.values()), b"")
            if not stand_in._methods.receive_upload(file_id, data):
                return 404, {"ok": False, "error": "file_not_found"}
            return 200, {"ok": True}

        def _response(self, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, Any]]:
            try:
                body = parse_body(headers.get("content-type", "application/json"), raw).fields
            except BodyError:
                return 400, {"ok": False, "error": "invalid_payload"}
            post = stand_in._post_to_response_url(stand_in.origin + self.path, body)
            if post is None:
                return 404, {"ok": False, "error": "expired_url"}
            if not post.accepted:
                return 404, {"ok": False, "error": "used_url"}
            return 200, {"ok": True}

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the call log is the record, not stderr."""

    return Handler
