"""The answers of the Web API methods the stand-in knows, over its in-memory workspace.

Each method takes the parsed body and returns Slack's JSON answer. Missing or wrong arguments
get the ``error`` code Slack documents for the method; nothing is changed by a refused call.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.testing._channels import ChannelStore
from bot.testing._payloads import APP_ID, TEAM_ID

__all__ = ["BOT_USER_ID", "METHODS_FOR_APP_TOKEN", "Upload", "WebApiMethods"]

BOT_USER_ID = "U0KIMIBOT"
METHODS_FOR_APP_TOKEN = frozenset({"apps.connections.open"})

Answer = dict[str, Any]


@dataclass
class Upload:
    """A file announced by ``files.getUploadURLExternal``, its bytes once posted."""

    file_id: str
    filename: str
    length: int
    alt_text: str | None
    data: bytes | None = None
    title: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    completed: bool = False


def _error(code: str) -> Answer:
    return {"ok": False, "error": code}


def _blocks(value: Any) -> list[Any] | None:
    """Blocks arrive as a JSON list (JSON body) or a JSON string (form body)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = json.loads(value) if value else []
    return list(value) if isinstance(value, list) else None


class WebApiMethods:
    """Answers ``auth.test``, ``chat.*``, ``apps.connections.open``, ``files.*`` uploads and
    ``usergroups.users.list``."""

    def __init__(self, channels: ChannelStore, origin: Callable[[], str]) -> None:
        self.channels = channels
        self._origin = origin
        self._lock = threading.Lock()
        self._file_ids = itertools.count(1)
        self.uploads: dict[str, Upload] = {}
        self.socket_mode_url: Callable[[], str] | None = None
        self._usergroups: dict[str, tuple[str, ...]] = {}
        self._handlers: dict[str, Callable[[dict[str, Any]], Answer]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "apps.connections.open": self._connections_open,
            "files.getUploadURLExternal": self._get_upload_url,
            "files.completeUploadExternal": self._complete_upload,
            "usergroups.users.list": self._usergroup_users,
        }

    def knows(self, method: str) -> bool:
        return method in self._handlers

    def answer(self, method: str, fields: dict[str, Any]) -> Answer:
        try:
            return self._handlers[method](fields)
        except (json.JSONDecodeError, TypeError, ValueError):
            # A field that should hold JSON (blocks, files) or a number does not.
            return _error("invalid_arguments")

    def _auth_test(self, fields: dict[str, Any]) -> Answer:
        return {
            "ok": True,
            "url": "https://kimi-ops-test.slack.com/",
            "team": "kimi-ops test",
            "user": "kimi-ops",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": "B0KIMIBOT",
            "app_id": APP_ID,
            "is_enterprise_install": False,
        }

    def _post_message(self, fields: dict[str, Any]) -> Answer:
        channel = fields.get("channel")
        if not channel:
            return _error("channel_not_found")
        text, blocks = fields.get("text"), _blocks(fields.get("blocks"))
        if not text and not blocks and not fields.get("attachments"):
            return _error("no_text")
        thread_ts = fields.get("thread_ts") or None
        if thread_ts is not None and self.channels.message(channel, thread_ts) is None:
            return _error("thread_not_found")
        message = self.channels.post(channel, text or "", blocks, thread_ts)
        return {
            "ok": True,
            "channel": channel,
            "ts": message.ts,
            "message": _message_json(message.text, list(message.blocks), message.ts, thread_ts),
        }

    def _update(self, fields: dict[str, Any]) -> Answer:
        channel, ts = fields.get("channel"), fields.get("ts")
        if not channel:
            return _error("channel_not_found")
        if not ts:
            return _error("message_not_found")
        text, blocks = fields.get("text"), _blocks(fields.get("blocks"))
        if text is None and blocks is None and not fields.get("attachments"):
            return _error("no_text")
        message = self.channels.update(channel, ts, text, blocks)
        if message is None:
            return _error("message_not_found")
        return {
            "ok": True,
            "channel": channel,
            "ts": ts,
            "text": message.text,
            "message": _message_json(message.text, list(message.blocks), ts, message.thread_ts),
        }

    def _post_ephemeral(self, fields: dict[str, Any]) -> Answer:
        channel, user = fields.get("channel"), fields.get("user")
        if not channel:
            return _error("channel_not_found")
        if not user:
            return _error("user_not_in_channel")
        text, blocks = fields.get("text") or "", _blocks(fields.get("blocks"))
        if not text and not blocks:
            return _error("no_text")
        # Ephemeral messages are seen by one user and never join the channel's history.
        reply = self.channels.post_ephemeral(channel, user, text, blocks)
        return {"ok": True, "message_ts": f"1767900000.{reply.seq:06d}"}

    def set_usergroup(self, group: str, users: tuple[str, ...]) -> None:
        with self._lock:
            self._usergroups[group] = users

    def _usergroup_users(self, fields: dict[str, Any]) -> Answer:
        group = fields.get("usergroup")
        if not group:
            return _error("invalid_arguments")
        with self._lock:
            users = self._usergroups.get(group)
        if users is None:
            return _error("no_such_subteam")
        return {"ok": True, "users": list(users)}

    def _connections_open(self, fields: dict[str, Any]) -> Answer:
        if self.socket_mode_url is None:
            # What Slack answers when the app has Socket Mode turned off.
            return _error("invalid_app_token_type_or_socket_mode_disabled")
        return {"ok": True, "url": self.socket_mode_url()}

    def _get_upload_url(self, fields: dict[str, Any]) -> Answer:
        filename, length = fields.get("filename"), fields.get("length")
        if not filename or length is None:
            return _error("invalid_arguments")
        size = int(length)
        if size <= 0:
            return _error("invalid_arguments")
        with self._lock:
            file_id = f"F0KIMI{next(self._file_ids):05d}"
            self.uploads[file_id] = Upload(file_id, filename, size, fields.get("alt_txt"))
        return {"ok": True, "upload_url": f"{self._origin()}/upload/{file_id}", "file_id": file_id}

    def receive_upload(self, file_id: str, data: bytes) -> bool:
        """Keep the bytes posted to an upload URL; False if the URL was never handed out."""
        with self._lock:
            upload = self.uploads.get(file_id)
            if upload is None or upload.completed:
                return False
            upload.data = data
            return True

    def _complete_upload(self, fields: dict[str, Any]) -> Answer:
        raw_files = fields.get("files")
        entries = json.loads(raw_files) if isinstance(raw_files, str) else raw_files
        if not isinstance(entries, list) or not entries:
            return _error("invalid_arguments")
        if not all(isinstance(e, dict) and isinstance(e.get("id"), str) for e in entries):
            return _error("invalid_arguments")
        channel = fields.get("channel_id") or None
        thread_ts = fields.get("thread_ts") or None
        with self._lock:
            uploads = [self.uploads.get(e["id"]) for e in entries]
            if any(u is None or u.data is None or u.completed for u in uploads):
                return _error("file_not_found")
            if thread_ts is not None and (
                channel is None or self.channels.message(channel, thread_ts) is None
            ):
                return _error("invalid_thread_ts")
            done = [u for u in uploads if u is not None]
            for upload, entry in zip(done, entries, strict=True):
                upload.title = entry.get("title") or upload.filename
                upload.channel, upload.thread_ts, upload.completed = channel, thread_ts, True
        if channel is not None:
            # Sharing a file posts a message carrying it, in the thread when one is named.
            comment = fields.get("initial_comment") or ""
            self.channels.post(channel, comment, None, thread_ts, tuple(u.file_id for u in done))
        return {
            "ok": True,
            "files": [
                {"id": u.file_id, "name": u.filename, "title": u.title, "size": len(u.data or b"")}
                for u in done
            ],
        }


def _message_json(text: str, blocks: list[Any], ts: str, thread_ts: str | None) -> Answer:
    message: Answer = {"type": "message", "user": BOT_USER_ID, "text": text, "ts": ts}
    if blocks:
        message["blocks"] = blocks
    if thread_ts is not None:
        message["thread_ts"] = thread_ts
    return message
