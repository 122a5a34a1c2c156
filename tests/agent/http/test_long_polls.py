"""Long-polls against a real agent: waiting polls leave the worker threads to status, and each
token's waiting polls are capped (``bot.agent.http._long_polls``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.agent._api_helpers import TOKEN, auth
from tests.agent.http._real_agent import RESIZE, real_agent, run_operation

pytestmark = pytest.mark.slow

# Far below the polls' 20 s wait, far above what a status call takes on a loaded machine.
STATUS_DEADLINE_S = 8.0


def _poll_tokens(count: int) -> list[str]:
    return [f"poll-secret-{index}" for index in range(count)]


def _token_env(poll_tokens: list[str]) -> str:
    named = [f"poller{index}:{secret}:ro" for index, secret in enumerate(poll_tokens)]
    return ",".join([TOKEN, *named])


async def _status_while_polling(
    url: str, op_id: int, after: int, tokens: list[str], per_token: int
) -> tuple[httpx.Response, int]:
    """Open ``per_token`` long-polls (wait 20 s) for each of ``tokens``, from four loopback
    addresses, then ask for status; the status response and how many polls were still waiting."""
    clients = [
        httpx.AsyncClient(
            base_url=url,
            timeout=60,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
            transport=httpx.AsyncHTTPTransport(local_address=f"127.0.0.{2 + index}"),
        )
        for index in range(4)
    ]
    polls = [
        asyncio.create_task(
            clients[n % 4].get(
                f"/v1/operations/{op_id}",
                params={"after": after, "wait": 20},
                headers=auth(secret),
            )
        )
        for n, secret in enumerate(s for s in tokens for _ in range(per_token))
    ]
    try:
        await asyncio.sleep(3.0)  # every poll has connected and is waiting
        async with httpx.AsyncClient(base_url=url, timeout=STATUS_DEADLINE_S) as http:
            status = await http.get("/v1/status", headers=auth())
        waiting = sum(not poll.done() for poll in polls)
    finally:
        for poll in polls:
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
        for client in clients:
            await client.aclose()
    return status, waiting


def test_status_answers_while_two_hundred_long_polls_wait(tmp_path: Path) -> None:
    """With 200 long-polls waiting (20 read-only tokens x 10), /v1/status still answers within
    its deadline. Failed before the fix: each poll held one of the 100 worker threads for its
    whole wait, and status queued behind them for ~20 s."""
    tokens = _poll_tokens(20)
    with real_agent(tmp_path, tokens=_token_env(tokens)) as agent:
        op_id, page = run_operation(agent.url, RESIZE)
        status, waiting = asyncio.run(
            _status_while_polling(agent.url, op_id, page["last_seq"], tokens, per_token=10)
        )
    assert status.status_code == 200
    assert status.json()["host"]["name"] == "kimi-test"
    assert waiting == 200


def test_a_token_over_its_long_poll_cap_gets_429_with_retry_after(tmp_path: Path) -> None:
    """A token with max_polls_per_token polls waiting gets 429 and Retry-After for one more,
    while another token's poll and the same token's wait=0 read are served. Failed before the
    fix: there was no cap, every poll waited."""
    tokens = _poll_tokens(2)
    with real_agent(tmp_path, tokens=_token_env(tokens), max_polls_per_token=3) as agent:
        op_id, page = run_operation(agent.url, RESIZE)
        path, after = f"/v1/operations/{op_id}", page["last_seq"]

        async def scenario() -> tuple[list[httpx.Response], httpx.Response, httpx.Response]:
            async with httpx.AsyncClient(base_url=agent.url, timeout=60) as http:
                held = [
                    asyncio.create_task(
                        http.get(path, params={"after": after, "wait": 4}, headers=auth(tokens[0]))
                    )
                    for _ in range(3)
                ]
                await asyncio.sleep(1.5)
                refused = await http.get(
                    path, params={"after": after, "wait": 4}, headers=auth(tokens[0])
                )
                read = await http.get(path, params={"after": after}, headers=auth(tokens[0]))
                other = await http.get(
                    path, params={"after": after, "wait": 0.5}, headers=auth(tokens[1])
                )
                return [refused, read, other], *(await asyncio.gather(*held))[:2]

        (refused, read, other), first, second = asyncio.run(scenario())
        began = time.monotonic()
        again = httpx.get(
            f"{agent.url}{path}",
            params={"after": after, "wait": 0.5},
            headers=auth(tokens[0]),
            timeout=30,
        )
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"
    assert "max_polls_per_token" in refused.json()["detail"]
    assert read.status_code == 200
    assert other.status_code == 200
    assert first.status_code == second.status_code == 200
    assert first.json()["events"] == []
    assert again.status_code == 200, "the slots come back once the polls end"
    assert time.monotonic() - began < 30
