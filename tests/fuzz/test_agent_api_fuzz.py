"""Schemathesis on the agent's OpenAPI, in process through its ASGI support: no request gets a
5xx, and no request answered 4xx changes anything in the agent's state directory.

``tests/agent/http/test_app_schema.py`` sends valid and invalid requests over real HTTP and
checks the status codes; this adds the state: the directory's every file is read before and
after each call. Valid requests go to every route but ``POST /v1/operations`` and
``POST /v1/live/operations`` (a valid one starts an operation, which is meant to change the
state); invalid ones go to every route. The agent is the real one on the small simulated host,
its server not started.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from bot.agent.config import AgentSettings
from bot.agent.http.app import create_app
from bot.agent.service import build_service
from tests.agent._api_helpers import SMALL, agent_settings, auth, tree_listing

pytestmark = pytest.mark.slow  # a real agent with its simulated host

MAX_EXAMPLES = 60
MAX_WAIT_S = 0.1  # generated long-poll waits are cut to this; the cap is tested elsewhere


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[FastAPI, AgentSettings]]:
    """The real agent's app on the small simulated host, and its settings."""
    settings_ = agent_settings(tmp_path, profile=SMALL, headroom_gb=2)
    service = build_service(settings_)
    try:
        yield create_app(service), settings_
    finally:
        service.manager.close()
        service.manager.control.stop(grace_s=5)
        service.close()


def state_of(root: Path) -> dict[str, object]:
    """What the agent keeps under ``root``: each SQLite database as its rows (a reader rewrites
    the ``-shm`` index and a checkpoint moves pages from ``-wal``, neither a change of state),
    every other file as its bytes."""
    out: dict[str, object] = {}
    for name, data in tree_listing(root).items():
        if name.endswith(("-shm", "-wal")):
            continue
        if data.startswith(b"SQLite format 3\x00"):
            uri = f"file:{root / name}?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
                out[name] = list(db.iterdump())
        else:
            out[name] = data
    return out


def _starts_an_operation(case: Any) -> bool:
    return bool(
        case.method.upper() == "POST" and case.path in ("/v1/operations", "/v1/live/operations")
    )


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_errs_and_no_refused_request_changes_the_state(
    agent: tuple[FastAPI, AgentSettings], mode: GenerationMode
) -> None:
    """Generated requests (valid, or invalid against the schema) get no 5xx; each answered 4xx
    leaves the state directory's files and database rows as they were; no invalid request is
    accepted."""
    app, settings_ = agent
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=auth())
    state = settings_.state_dir
    codes: set[tuple[str, int]] = set()

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=schema.as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        if mode is GenerationMode.POSITIVE and _starts_an_operation(case):
            return
        wait = (case.query or {}).get("wait")
        if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > MAX_WAIT_S:
            case.query["wait"] = MAX_WAIT_S
        before = state_of(state)
        response = case.call(headers=auth())
        codes.add((case.path, response.status_code))
        assert response.status_code < 500, (case.method, case.path, response.text[:300])
        if 400 <= response.status_code < 500:
            assert state_of(state) == before, (case.method, case.path, response.status_code)
        if mode is GenerationMode.NEGATIVE and _starts_an_operation(case):
            assert response.status_code != 202, ("an invalid body started an operation", case.body)

    check()
    refused = {path for path, code in codes if 400 <= code < 500}
    if mode is GenerationMode.NEGATIVE:
        assert {"/v1/plans", "/v1/operations"} <= refused  # the checks above did run on 4xx
    assert state_of(state), "the state directory is empty: the comparison proved nothing"
