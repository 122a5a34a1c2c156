"""Schemathesis against the agent's own OpenAPI schema: generated requests never get a 5xx.

The schema is the one the app serves at /openapi.json; requests (valid and invalid ones) go over
real HTTP to uvicorn on a free port, in front of the real service on the simulator (small
profile). Examples are bounded and deterministic so the test stays fast and repeatable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.schemas import BaseSchema

from bot.agent.http.app import create_app
from bot.agent.service import build_service
from tests.agent._api_helpers import SMALL, agent_settings, auth, serve_in_thread

# Real subprocesses or a real server with simulated timings: not in the fast loop.
pytestmark = pytest.mark.slow

MAX_EXAMPLES = 150
# Generated waits are cut to this, so the examples stay fast (the cap itself is tested elsewhere).
MAX_WAIT_S = 0.1


@pytest.fixture
def agent_url(tmp_path: Path) -> Iterator[str]:
    """The real agent API (small simulated host, server not started) on a free port."""
    settings = agent_settings(tmp_path, profile=SMALL, headroom_gb=2)
    service = build_service(settings)
    try:
        with serve_in_thread(create_app(service)) as url:
            yield url
    finally:
        service.manager.close()
        service.manager.control.stop(grace_s=5)
        service.close()


def _schema(agent_url: str) -> BaseSchema:
    """The schema as the running agent serves it (with the token: /openapi.json is guarded)."""
    response = httpx.get(f"{agent_url}/openapi.json", headers=auth(), timeout=10)
    assert response.status_code == 200
    return schemathesis.openapi.from_dict(response.json())


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_gets_a_server_error(agent_url: str, mode: GenerationMode) -> None:
    """Generated requests for every route, valid (positive) or not (negative), are answered
    below 500 with a JSON body."""
    strategy = _schema(agent_url).as_strategy(generation_mode=mode)
    seen: set[tuple[str, int]] = set()

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case: Any) -> None:
        wait = (case.query or {}).get("wait")
        if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > MAX_WAIT_S:
            case.query["wait"] = MAX_WAIT_S  # a long-poll may legitimately hold up to 60 s
        response = case.call(base_url=agent_url, headers=auth(), timeout=30)
        assert response.status_code < 500, (case.method, case.path, response.text[:500])
        assert response.headers.get("content-type", [""])[0].startswith("application/json")
        seen.add((case.operation.path, response.status_code))

    check()
    # The examples reached every route that takes input, not just the first one.
    reached = {path for path, _ in seen}
    assert reached >= {"/v1/plans", "/v1/operations", "/v1/operations/{op_id}"}
    if mode is GenerationMode.POSITIVE:
        assert "/v1/status" in reached
