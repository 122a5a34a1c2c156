"""What the Web API stand-in keeps of each call, and the thread-safe log that holds them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallLog", "RecordedCall", "request_token"]


def request_token(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The token of a request: ``Authorization: Bearer ...``, else a ``token`` body field."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[len("bearer ") :].strip() or None
    token = body.get("token")
    return token if isinstance(token, str) and token else None


@dataclass(frozen=True)
class RecordedCall:
    """One HTTP request the stand-in received, as Slack would have seen it.

    ``method`` is the Web API method (``chat.update``), or ``upload`` / ``response_url`` for the
    two non-API endpoints. ``body`` is the JSON or form body parsed into a mapping (form values
    are single strings, as Slack reads them); ``raw_body`` is the bytes as sent. ``status`` is the
    HTTP status the stand-in answered and ``response`` the JSON it answered with (``None`` for a
    non-JSON answer). ``at`` is ``time.monotonic()`` when the request arrived.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    raw_body: bytes
    status: int
    response: Mapping[str, Any] | None
    at: float = field(default_factory=time.monotonic)

    @property
    def token(self) -> str | None:
        """The bearer token from ``Authorization``, else a ``token`` body field, else None."""
        return request_token(self.headers, self.body)

    @property
    def ok(self) -> bool:
        """Whether the stand-in answered 200 with ``"ok": true`` (or 200 for a non-JSON answer)."""
        if self.status != 200:
            return False
        return self.response is None or bool(self.response.get("ok"))


class CallLog:
    """Every call, in arrival order; safe to append from server threads and read from a test."""

    def __init__(self) -> None:
        self._calls: list[RecordedCall] = []
        self._changed = threading.Condition()

    def append(self, call: RecordedCall) -> None:
        with self._changed:
            self._calls.append(call)
            self._changed.notify_all()

    def calls(self, method: str | None = None) -> list[RecordedCall]:
        """A snapshot of the calls so far, only those to ``method`` when it is given."""
        with self._changed:
            return [c for c in self._calls if method is None or c.method == method]

    def wait_for(
        self, predicate: Callable[[list[RecordedCall]], bool], timeout: float
    ) -> list[RecordedCall]:
        """Block until ``predicate(calls)`` holds; return the calls, or raise TimeoutError.

        The predicate sees the whole log each time a call arrives, so a test can wait for
        "the third chat.update" or "an update whose text says ready" alike.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self._calls)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    methods = [c.method for c in self._calls]
                    raise TimeoutError(
                        f"no call satisfied the condition within {timeout} s; "
                        f"calls so far: {methods}"
                    )
                self._changed.wait(remaining)
            return list(self._calls)
