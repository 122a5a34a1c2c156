"""Tests for the agent's tokens over real HTTP: several at once, rotation, read-only, the caller.

The agent is the real one (process backend on the simulator, ``probe = "sim"``, SQLite state)
served by uvicorn on a free port in a thread; its token variable holds several tokens. The
caller's trip into the audit goes through the real store (SQLite through Alembic's migrations)
and the one mapping from agent answers to store records, ``bot.store.from_agent``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.agent.config import load_agent_settings
from bot.agent.http.app import create_app
from bot.agent.service import build_service
from bot.agent.sglang_client import SGLangClient
from bot.store import Store, record_agent_operation, upgrade_to_head
from tests.agent._api_helpers import TOKEN_ENV, auth, serve_in_thread, write_config
from tests.agent.conftest import wait_until

# A real server with simulated timings: not in the fast loop.
pytestmark = pytest.mark.slow

OLD = "0ld-t0ken-4b1d9e7c2a"
NEW = "n3w-t0ken-8e2f6a0d5c"
VIEWER = "v13w-t0ken-3c7a1f9e0b"
FINAL = {"ready", "failed", "rolled_back"}


@contextlib.contextmanager
def agent_with_tokens(tmp_path: Path, tokens: str, serving: bool = False) -> Iterator[httpx.Client]:
    """The agent's API with ``tokens`` in its token variable; yields a client without a token.
    ``serving``: the simulated server is started first (directly, not by an operation)."""
    settings = load_agent_settings(write_config(tmp_path), {TOKEN_ENV: tokens})
    service = build_service(settings)
    try:
        if serving:
            service.manager.control.start("test:1")
            sglang = SGLangClient(settings.server_url)
            try:
                wait_until(lambda: sglang.health() == 200, timeout_s=60)
            finally:
                sglang.close()
        with (
            serve_in_thread(create_app(service)) as url,
            httpx.Client(base_url=url, timeout=30) as client,
        ):
            yield client
    finally:
        service.manager.close()
        service.manager.control.stop(grace_s=5)
        service.close()


def wait_final(http: httpx.Client, op_id: int, token: str) -> dict[str, Any]:
    """Long-poll until the operation ends; its last page with every event."""
    events: list[dict[str, Any]] = []
    after = 0
    for _ in range(120):
        page = http.get(
            f"/v1/operations/{op_id}", params={"after": after, "wait": 5}, headers=auth(token)
        ).json()
        events += page["events"]
        after = page["last_seq"]
        if page["state"] in FINAL:
            return {**page, "events": events}
    pytest.fail(f"operation {op_id} did not finish")


def test_two_tokens_work_at_once_and_a_removed_one_gets_401(tmp_path: Path) -> None:
    """Mid-rotation both tokens are accepted; once the old one is dropped it gets the very answer
    a token that never existed gets."""
    with agent_with_tokens(tmp_path, f"bot:{OLD},bot:{NEW}") as http:
        for token in (OLD, NEW):
            assert http.get("/v1/status", headers=auth(token)).status_code == 200, token
            plan = http.post("/v1/plans", json={"ratio": 4}, headers=auth(token))
            assert plan.status_code == 200, token
    with agent_with_tokens(tmp_path, f"bot:{NEW}") as http:
        assert http.get("/v1/status", headers=auth(NEW)).status_code == 200
        removed = http.get("/v1/status", headers=auth(OLD))
        never = http.get("/v1/status", headers=auth("never-issued-token-0000"))
        assert removed.status_code == never.status_code == 401
        assert removed.content == never.content
        assert removed.json() == {"detail": "unauthorized"}
        assert removed.headers["www-authenticate"] == never.headers["www-authenticate"]


def test_a_read_only_token_reads_and_plans_but_gets_403_on_operations(tmp_path: Path) -> None:
    """A NAME:TOKEN:ro token gets status, plans and reads, and 403 on POST /v1/operations, which
    then starts nothing; the 403 says nothing about other tokens."""
    with agent_with_tokens(tmp_path, f"bot:{NEW},grafana:{VIEWER}:ro") as http:
        viewer = auth(VIEWER)
        assert http.get("/v1/status", headers=viewer).status_code == 200
        assert http.post("/v1/plans", json={"ratio": 4}, headers=viewer).status_code == 200
        assert http.get("/v1/operations", headers=viewer).status_code == 200
        assert http.get("/v1/revisions", headers=viewer).status_code == 200
        for body in (
            {"kind": "restart", "actor": "U0ANA"},
            {"kind": "resize", "ratio": 4, "actor": "U0ANA"},
            {"kind": "rollback", "actor": "U0ANA"},
        ):
            refused = http.post("/v1/operations", json=body, headers=viewer)
            assert refused.status_code == 403, body
            detail = refused.json()["detail"]
            assert detail.startswith("forbidden")
            assert "bot" not in detail
            assert NEW not in refused.text
            assert VIEWER not in refused.text
        assert http.get("/v1/operations", headers=auth(NEW)).json() == {"operations": []}


def test_the_callers_name_is_in_the_operation_and_in_the_stores_audit(tmp_path: Path) -> None:
    """An operation started with NAME:TOKEN carries caller NAME in the agent's JSON, and the store
    records it on the operation through bot.store.from_agent; an unnamed token records None."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    upgrade_to_head(url)
    with (
        agent_with_tokens(tmp_path, f"oncall-laptop:{OLD},{NEW}", serving=True) as http,
        Store(url) as store,
    ):
        started = http.post(
            "/v1/operations", json={"kind": "restart", "actor": "U0ANA"}, headers=auth(OLD)
        )
        assert started.status_code == 202, started.text
        assert started.json()["operation"]["caller"] == "oncall-laptop"
        op_id = started.json()["id"]
        page = wait_final(http, op_id, OLD)
        assert page["operation"]["caller"] == "oncall-laptop"
        assert page["operation"]["actor"] == "U0ANA"
        revisions = http.get("/v1/revisions", headers=auth(OLD)).json()
        recorded = record_agent_operation(store, "kimi-01", page, revisions)
        assert recorded.caller == "oncall-laptop"
        assert store.operation(recorded.id).caller == "oncall-laptop"

        unnamed = http.post(
            "/v1/operations", json={"kind": "restart", "actor": "U0BEN"}, headers=auth(NEW)
        )
        assert unnamed.status_code == 202, unnamed.text
        second = wait_final(http, unnamed.json()["id"], NEW)
        assert second["operation"]["caller"] is None
        revisions = http.get("/v1/revisions", headers=auth(NEW)).json()
        assert record_agent_operation(store, "kimi-01", second, revisions).caller is None
