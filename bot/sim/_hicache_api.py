"""HiCache's runtime API as SGLang 0.5.23 serves it: ``/hicache/storage-backend`` and its clear.

``entrypoints/http_server.py`` (routes), ``utils/auth.py`` (the admin key),
``managers/scheduler.py`` (the idle rule) and ``mem_cache/unified_cache/storage_attachment.py``
(what an attach does) are reproduced in their answers:

- the admin key: with ``--admin-api-key`` a call needs ``Authorization: Bearer <key>`` (401
  ``{"error": "Unauthorized"}`` otherwise); without one the route itself answers 400 with
  SGLang's "requires admin API key" sentence (the clear has no such check);
- the idle rule: attach and detach are refused while a request runs or waits, with the
  scheduler's words ("Reject attach: scheduler is not idle. #queue-req=0 #running-req=1");
- an attach of another backend while one is attached is refused ("Detach first."); of the same
  backend it changes only the policies;
- the live values start from the command line and live in this process only: a restart
  forgets every change the command line does not also say.

``live_not_applied`` (``KIMI_SIM_FAIL``) makes an attach answer 200 while the values ``GET``
shows stay as they were: the failed verify the agent must revert.
"""

from __future__ import annotations

import argparse
import hmac
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AdminAnswer", "LiveHiCacheState"]

PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
WRITE_POLICIES = ("write_back", "write_through", "write_through_selective")
ADMIN_KEY_MISSING = (
    "This endpoint requires admin API key, but this server was started "
    "without one (admin-api-key). Restart with --admin-api-key to enable."
)


@dataclass(frozen=True)
class AdminAnswer:
    """One HTTP answer: status, body bytes and content type."""

    status: int
    body: bytes
    content_type: str

    @classmethod
    def text(cls, status: int, text: str) -> AdminAnswer:
        return cls(status, text.encode(), "text/plain; charset=utf-8")

    @classmethod
    def json(cls, status: int, payload: object) -> AdminAnswer:
        return cls(status, json.dumps(payload).encode(), "application/json")


class LiveHiCacheState:
    """The server's HiCache storage settings in effect, changed through the runtime API."""

    def __init__(
        self,
        args: argparse.Namespace,
        busy: Callable[[], tuple[int, int]],
        apply_fails: bool = False,
    ) -> None:
        self._hierarchical = bool(args.enable_hierarchical_cache)
        self._admin_key: str | None = args.admin_api_key or None
        self._api_key: str | None = args.api_key or None
        self._busy = busy
        self._apply_fails = apply_fails
        self._lock = threading.Lock()
        self._backend: str | None = args.hicache_storage_backend
        self._extra: str | None = args.hicache_storage_backend_extra_config
        self._prefetch: str = args.hicache_storage_prefetch_policy
        self._write: str = args.hicache_write_policy

    def authorized(self, authorization: str | None) -> AdminAnswer | None:
        """``utils/auth.py``'s ADMIN_OPTIONAL rule: None when allowed, else the 401."""
        expected = self._admin_key or self._api_key
        if expected is None:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), expected.encode()):
            return None
        return AdminAnswer.json(401, {"error": "Unauthorized"})

    def status(self) -> AdminAnswer:
        if self._admin_key is None:
            return AdminAnswer.json(400, {"error": ADMIN_KEY_MISSING})
        with self._lock:
            return AdminAnswer.json(
                200,
                {
                    "hicache_storage_backend": self._backend,
                    "hicache_storage_backend_extra_config": self._extra,
                    "hicache_storage_prefetch_policy": self._prefetch,
                    "hicache_write_policy": self._write,
                },
            )

    def _not_idle(self, verb: str) -> str | None:
        running, waiting = self._busy()
        if running or waiting:
            return (
                f"Reject {verb}: scheduler is not idle. #queue-req={waiting} #running-req={running}"
            )
        return None

    def attach(self, raw: bytes) -> AdminAnswer:
        if self._admin_key is None:
            return AdminAnswer.json(400, {"error": ADMIN_KEY_MISSING})
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        backend = body.get("hicache_storage_backend") if isinstance(body, dict) else None
        if not isinstance(backend, str):
            detail = [
                {
                    "type": "missing",
                    "loc": ["body", "hicache_storage_backend"],
                    "msg": "Field required",
                }
            ]
            return AdminAnswer.json(422, {"detail": detail})
        assert isinstance(body, dict)
        extra = body.get("hicache_storage_backend_extra_config_json")
        prefetch = body.get("hicache_storage_prefetch_policy")
        write = body.get("hicache_write_policy")
        ok, message = self._attach(backend, extra, prefetch, write)
        head = (
            "HiCache storage backend attached.\n"
            if ok
            else "Failed to attach HiCache storage backend.\n"
        )
        return AdminAnswer.text(200 if ok else 400, head + (message + "\n" if message else ""))

    def _attach(
        self, backend: str, extra: str | None, prefetch: str | None, write: str | None
    ) -> tuple[bool, str]:
        if not self._hierarchical:
            return False, "Hierarchical cache is not enabled."
        refused = self._not_idle("attach")
        if refused:
            return False, refused
        if prefetch is not None and prefetch not in PREFETCH_POLICIES:
            return False, (
                f"Invalid hicache_storage_prefetch_policy: {prefetch!r}. "
                f"Expected one of {list(PREFETCH_POLICIES)}."
            )
        if write is not None and write not in WRITE_POLICIES:
            return False, (
                f"Invalid hicache_write_policy: {write!r}. Expected one of {list(WRITE_POLICIES)}."
            )
        with self._lock:
            if self._backend is not None and self._backend != backend:
                return False, (
                    f"HiCache storage backend is already enabled with backend "
                    f"'{self._backend}'. Cannot attach different backend "
                    f"'{backend}'. Detach first."
                )
            same = self._backend == backend
            if not same and extra:
                try:
                    parsed = json.loads(extra)
                except ValueError as exc:
                    return False, (
                        f"Failed to parse storage_backend_extra_config_json '{extra}': {exc}"
                    )
                if not isinstance(parsed, dict):
                    return False, (
                        f"Failed to parse storage_backend_extra_config_json '{extra}': "
                        "not a JSON object"
                    )
            if self._apply_fails:
                return True, "Attached HiCache storage backend successfully."
            if prefetch is not None:
                self._prefetch = prefetch
            if write is not None:
                self._write = write
            if same:
                return True, (
                    "HiCache storage backend already enabled with same backend; policies updated."
                )
            self._backend = backend
            if extra is not None:
                self._extra = extra
            return True, "Attached HiCache storage backend successfully."

    def detach(self) -> AdminAnswer:
        if self._admin_key is None:
            return AdminAnswer.json(400, {"error": ADMIN_KEY_MISSING})
        if not self._hierarchical:
            ok, message = False, "Hierarchical cache is not enabled."
        else:
            refused = self._not_idle("detach")
            if refused:
                ok, message = False, refused
            else:
                with self._lock:
                    self._backend = None
                    self._extra = None
                ok, message = True, "HiCache storage backend is detached."
        head = (
            "HiCache storage backend detached.\n"
            if ok
            else "Failed to detach HiCache storage backend.\n"
        )
        return AdminAnswer.text(200 if ok else 400, head + message + "\n")

    def clear(self) -> AdminAnswer:
        ok = self._hierarchical
        return AdminAnswer.text(200 if ok else 400, "Hierarchical cache storage backend cleared.\n")
