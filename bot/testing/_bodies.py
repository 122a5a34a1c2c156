"""Read a request body the way Slack does: JSON, URL-encoded form, or multipart form.

``chat.postMessage`` and ``chat.update`` arrive from slack_sdk as JSON; ``auth.test``, ``files.*``
and ``apps.connections.open`` as URL-encoded forms; Slack's own upload examples use multipart.
Anything else is refused with the error code Slack gives for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["BodyError", "ParsedBody", "parse_body"]


class BodyError(Exception):
    """The body cannot be read; ``code`` is the ``error`` Slack answers with."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class ParsedBody:
    """Fields of the body (strings, or JSON values for a JSON body) and any uploaded files."""

    fields: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)


def parse_body(content_type: str, raw: bytes) -> ParsedBody:
    """Parse ``raw`` by its ``Content-Type``; raise BodyError with Slack's code if it cannot."""
    if not raw:
        return ParsedBody(fields={})
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/json":
        return ParsedBody(fields=_json_fields(raw))
    if media_type == "application/x-www-form-urlencoded":
        return ParsedBody(fields=_form_fields(raw))
    if media_type == "multipart/form-data":
        return _multipart(content_type, raw)
    raise BodyError("invalid_post_type")


def _json_fields(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BodyError("invalid_json") from exc
    if not isinstance(value, dict):
        raise BodyError("invalid_json")
    return value


def _form_fields(raw: bytes) -> dict[str, Any]:
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BodyError("invalid_form_data") from exc
    # Slack keeps one value per name; the last one wins, as in most form readers.
    return dict(pairs)


def _multipart(content_type: str, raw: bytes) -> ParsedBody:
    header = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(header + raw)
    if not message.is_multipart():
        raise BodyError("invalid_form_data")
    fields: dict[str, Any] = {}
    files: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise BodyError("invalid_form_data")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        if part.get_filename() is not None:
            files[name] = data
        else:
            fields[name] = data.decode("utf-8", errors="replace")
    return ParsedBody(fields=fields, files=files)
