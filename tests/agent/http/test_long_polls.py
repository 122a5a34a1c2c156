"""Long-polls against a real agent: waiting polls leave the worker threads to status, and each
token's waiting polls are capped (``bot.agent.http._long_polls``)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from bot.agent.http._long_polls import ChangeFeed, PollSlots
from tests.agent._api_helpers import TOKEN, auth
from tests.agent.http._real_agent import RESIZE, real_agent, run_operation

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_token_over_its_long_poll_cap_gets_429_with_retry_after(tmp_path: Path) -> None:
    """A token with max_polls_per_token polls waiting gets 429 and Retry-After for one more,
    while another token's poll and the same token's wait=0 read are served; polls whose client
    left give their slots back at once. Failed before the fix: there was no cap, every poll
    waited."""
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

        # Three polls (wait 30 s) whose client closes its connection after a second.
        host, port = agent.url.removeprefix("http://").rsplit(":", 1)
        leaving = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
        for sock in leaving:
            sock.sendall(
                f"GET {path}?after={after}&wait=30 HTTP/1.1\r\nHost: agent\r\n"
                f"Authorization: Bearer {tokens[0]}\r\n\r\n".encode()
            )
        time.sleep(1.0)
        for sock in leaving:
            sock.close()
        time.sleep(1.0)
        after_leaving = httpx.get(
            f"{agent.url}{path}",
            params={"after": after, "wait": 0.5},
            headers=auth(tokens[0]),
            timeout=30,
        )
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
    assert after_leaving.status_code == 200, "a poll whose client left gives its slot back"
    assert time.monotonic() - began < 30


class _Changes:
    """A state's ``wait_changed``: True once ``commit()`` was called since the last wait."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def commit(self) -> None:
        self._event.set()

    def wait_changed(self, timeout_s: float) -> bool:
        changed = self._event.wait(timeout_s)
        self._event.clear()
        return changed


def test_the_feed_wakes_every_waiting_poll_at_a_commit_and_all_of_them_at_stop() -> None:
    """Three subscribed polls are woken (not timed out) by one commit from another thread; a
    later subscriber is woken when the agent stops."""
    changes, stopping = _Changes(), threading.Event()
    feed = ChangeFeed(changes.wait_changed, stopping)

    async def scenario() -> tuple[list[bool], bool]:
        waiting = [feed.subscribe() for _ in range(3)]
        threading.Timer(0.2, changes.commit).start()
        await asyncio.gather(*(feed.wait(future, 30) for future in waiting))
        late = feed.subscribe()
        threading.Timer(0.2, stopping.set).start()
        await feed.wait(late, 30)
        return [future.done() for future in waiting], late.done()

    woken, late_woken = asyncio.run(scenario())
    assert woken == [True, True, True]
    assert late_woken


def test_poll_slots_refuse_past_the_cap_per_token_and_come_back() -> None:
    """Two slots per token: a third is refused, another token still gets one, and a slot given
    back is taken again."""
    slots = PollSlots(2)
    assert [slots.take("a"), slots.take("a"), slots.take("a")] == [True, True, False]
    assert slots.take("b")
    slots.give_back("a")
    assert slots.take("a")
    assert not slots.take("a")
