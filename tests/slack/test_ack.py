"""The ack comes first: a command's HTTP answer never waits on the work it starts (the store,
the agent), as Slack wants it within 3 s and Bolt now answers once the listener returns."""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import pytest

from bot.slack.service import DEFAULT_WORKERS
from bot.store import Store
from bot.testing import SlackApiStandIn, SlackRequestSigner
from tests.chat.conftest import RunningAgent
from tests.slack._harness import (
    BEN,
    CHANNEL,
    SIGNING_SECRET,
    http_bot,
    posted_proposal_id,
    settings_for,
    top_level,
    wait_until,
)

# Far below the store's 30 s busy timeout and an agent's 15 s: an ack held by either fails here.
ACK_BOUND_S = 10.0


@contextmanager
def store_write_locked(database: Path) -> Iterator[None]:
    """Another connection holding SQLite's write lock on ``database`` until the block ends."""
    with closing(sqlite3.connect(database, timeout=1, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")


def silent_agent() -> socket.socket:
    """A listening socket that accepts connections (the kernel's backlog) but never answers;
    closing it resets every connection still waiting."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@pytest.mark.slow
def test_a_resize_is_acked_while_the_store_is_locked(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store, tmp_path: Path
) -> None:
    """/kimi resize ratio 4 gets its 200 while another connection holds the store's write lock
    (the proposal cannot be recorded); once the lock is let go the proposal is recorded and
    posted as usual."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    with http_bot(slack, settings_for(kimi_agent.url), store) as bot:
        request = signer.slash_command(
            "resize ratio 4",
            response_url=slack.new_response_url(),
            user_id=BEN,
            channel_id=CHANNEL,
        )
        with store_write_locked(tmp_path / "kimi-ops.db"):
            began = time.monotonic()
            answer = httpx.post(
                bot.url, content=request.body, headers=request.headers, timeout=ACK_BOUND_S
            )
            acked_s = time.monotonic() - began
            assert answer.status_code == 200
            assert answer.content == b""
            assert top_level(slack) == []  # nothing recorded, so nothing posted yet
        proposal = posted_proposal_id(slack)
    assert store.proposal(proposal).channel == CHANNEL
    assert acked_s < ACK_BOUND_S


@pytest.mark.slow
def test_status_commands_are_acked_while_every_worker_waits_on_a_silent_agent(
    slack: SlackApiStandIn, store: Store
) -> None:
    """More /kimi status commands than the bot has workers, all at once, to an agent that
    never answers: every one is acked (200, empty) while the workers still wait; each still
    answers in the channel once the agent's port closes."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    count = DEFAULT_WORKERS + 4
    agent = silent_agent()
    agent_url = f"http://127.0.0.1:{agent.getsockname()[1]}"
    try:
        with http_bot(slack, settings_for(agent_url), store) as bot:
            requests = [
                signer.slash_command(
                    "status", response_url=slack.new_response_url(), user_id=BEN, channel_id=CHANNEL
                )
                for _ in range(count)
            ]

            def send(index: int) -> httpx.Response:
                request = requests[index]
                return httpx.post(
                    bot.url, content=request.body, headers=request.headers, timeout=ACK_BOUND_S
                )

            with ThreadPoolExecutor(count) as pool:
                answers = list(pool.map(send, range(count)))
            assert [(a.status_code, a.content) for a in answers] == [(200, b"")] * count
            assert top_level(slack) == []  # every status is still waiting on the agent
            agent.close()
            wait_until(lambda: len(top_level(slack)) == count, timeout=60, what="every reply")
    finally:
        agent.close()
