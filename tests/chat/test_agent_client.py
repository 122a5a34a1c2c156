"""The agent client against a real agent on the simulator, and against the answers it cannot
provoke on purpose (503, a dropped connection) through ``httpx.MockTransport``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from bot.chat.agent_client import KEEPALIVE_S, AgentClient
from bot.errors import (
    AgentAuthError,
    AgentBusy,
    AgentError,
    AgentNotFound,
    AgentPlanRefused,
    AgentRejected,
    AgentStale,
    AgentUnavailable,
    AgentUnreachable,
)
from bot.settings import Secret
from bot.vocab import EventPhase, OperationKind, OperationState, ServerState
from tests.chat.conftest import RunningAgent, free_port

GB = 1e9
# The field notes' server (SGLANG_FACTS.md section 1): 159,274 device tokens per rank at mem
# fraction 0.88, 70,246 bytes per token of KV across the model's layers, TP 8.
DEVICE_TOKENS = 159_274
RANKS = 8


@pytest.fixture
def client(kimi_agent: RunningAgent) -> Iterator[AgentClient]:
    with AgentClient(kimi_agent.url, kimi_agent.token, host="kimi-01") as agent_client:
        yield agent_client


@pytest.mark.slow
def test_status_plan_resize_and_long_poll_against_a_real_agent(client: AgentClient) -> None:
    """Status reads ratio 2; a ratio-4 plan fits with SGLang's sizing; the resize submitted with
    its fingerprint long-polls to ready with seqs 1..n and no event twice."""
    status = client.status()
    assert status.server_state is ServerState.RUNNING
    assert status.hicache is not None
    assert status.hicache.ratio == 2.0
    assert status.device_tokens == DEVICE_TOKENS
    assert status.operation is None

    change = client.plan(ratio=4)
    # SGLang: host tokens per rank = device tokens x ratio, plus one page (page size 1).
    assert change.plan.per_rank_tokens == DEVICE_TOKENS * 4 + 1
    assert change.plan.fits
    assert change.plan.ranks == RANKS
    assert change.fingerprint

    operation = client.submit(
        OperationKind.RESIZE, actor="ana", ratio=4, fingerprint=change.fingerprint
    )
    assert operation.kind is OperationKind.RESIZE
    seqs: list[int] = []
    after = 0
    page = client.events(operation.id, after=after, wait_s=10)
    for _ in range(200):
        seqs += [event.seq for event in page.events]
        after = page.last_seq
        if page.operation.finished:
            break
        page = client.events(operation.id, after=after, wait_s=10)
    assert page.operation.state is OperationState.READY
    assert seqs == list(range(1, len(seqs) + 1))
    assert client.events(operation.id).events[-1].phase is EventPhase.READY
    assert client.status().hicache.ratio == 4.0  # type: ignore[union-attr]
    assert client.operations(5)[0].id == operation.id
    assert client.revisions()[page.operation.revision].setting.ratio == 4.0  # type: ignore[index]


@pytest.mark.slow
def test_the_agents_refusals_become_typed_errors(client: AgentClient) -> None:
    """422 (SGLang rejects the value) carries the Plan; 409 stale says so; 404 names nothing
    found; an over-budget plan is a refused plan, not an error."""
    with pytest.raises(AgentPlanRefused) as refused:
        client.plan(size_gb=0)
    assert refused.value.plan["verdict"] == "refused"
    assert refused.value.status_code == 422

    over = client.plan(size_gb=300)
    assert not over.plan.fits
    assert over.plan.total_gb == pytest.approx(300 * RANKS, rel=1e-3)

    with pytest.raises(AgentStale):
        client.submit(OperationKind.RESIZE, actor="ana", ratio=4, fingerprint="0" * 16)
    with pytest.raises(AgentNotFound):
        client.events(999_999)


@pytest.mark.slow
def test_a_second_operation_is_told_who_holds_the_server(client: AgentClient) -> None:
    """While one operation runs, another gets AgentBusy with the holder and since when."""
    first = client.submit(OperationKind.RESTART, actor="ana")
    with pytest.raises(AgentBusy) as busy:
        client.submit(OperationKind.RESTART, actor="ben")
    assert busy.value.holder == "ana"
    assert busy.value.since
    page = client.events(first.id)
    for _ in range(200):
        if page.operation.finished:
            break
        page = client.events(first.id, after=page.last_seq, wait_s=10)
    assert page.operation.state is OperationState.READY


@pytest.mark.slow
def test_a_wrong_token_is_an_auth_error(kimi_agent: RunningAgent) -> None:
    """A token the agent does not hold gives AgentAuthError, never the token in the message."""
    with (
        AgentClient(kimi_agent.url, Secret("wrong-token-xyz"), host="kimi-01") as client,
        pytest.raises(AgentAuthError) as caught,
    ):
        client.status()
    assert "wrong-token-xyz" not in str(caught.value)
    assert "wrong-token-xyz" not in repr(client)


def test_nothing_listening_is_unreachable() -> None:
    """A port nobody listens on gives AgentUnreachable naming the host."""
    with (
        AgentClient(f"http://127.0.0.1:{free_port()}", Secret("t"), host="kimi-09") as client,
        pytest.raises(AgentUnreachable, match="kimi-09"),
    ):
        client.status()


def _answering(status: int, body: object) -> AgentClient:
    """A client whose agent always answers ``status`` with ``body``."""
    transport = httpx.MockTransport(lambda request: httpx.Response(status, json=body))
    return AgentClient("http://agent", Secret("t"), transport=transport)


def test_a_503_is_unavailable_with_the_agents_reason() -> None:
    """The agent's 503 (host facts unreadable) becomes AgentUnavailable carrying its detail."""
    with (
        _answering(503, {"detail": "NVML: driver not loaded"}) as client,
        pytest.raises(AgentUnavailable, match="driver not loaded") as caught,
    ):
        client.status()
    assert caught.value.body == {"detail": "NVML: driver not loaded"}


def test_a_422_without_a_plan_names_the_field() -> None:
    """A body the agent rejects field by field becomes AgentRejected naming the field."""
    detail = [{"loc": ["body", "ratio"], "msg": "must be finite", "type": "finite_number"}]
    with (
        _answering(422, {"detail": detail}) as client,
        pytest.raises(AgentRejected, match="ratio: must be finite") as caught,
    ):
        client.plan(ratio=4)
    assert caught.value.status_code == 422


def test_an_unreadable_answer_is_an_agent_error() -> None:
    """A 200 whose body lacks what the bot needs is an AgentError, not a KeyError."""
    with _answering(200, {"plan": {}}) as client, pytest.raises(AgentError, match="no 'request'"):
        client.plan(ratio=4)
    with _answering(200, {"events": "x"}) as client, pytest.raises(AgentError, match="cannot read"):
        client.events(1)


def test_a_timeout_is_unreachable() -> None:
    """A read timeout becomes AgentUnreachable: a status-like read says it had no answer
    within the read deadline, any other call that it did not answer in time."""

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    transport = httpx.MockTransport(slow)
    with AgentClient("http://agent", Secret("t"), transport=transport) as client:
        with pytest.raises(AgentUnreachable, match=r"^agent http://agent: no answer in 1 s$"):
            client.status()
        with pytest.raises(AgentUnreachable, match=r"^agent http://agent: no answer in 1 s$"):
            client.operations()
        with pytest.raises(AgentUnreachable, match="did not answer in time"):
            client.plan(ratio=4)


def test_status_like_reads_carry_the_read_deadline() -> None:
    """status and the operation list are sent with the client's read deadline as their
    timeout; a plan keeps the ordinary one (before, every read waited 15 s)."""
    seen: dict[str, object] = {}

    def record(request: httpx.Request) -> httpx.Response:
        seen[request.url.path] = request.extensions["timeout"]
        return httpx.Response(503, json={"detail": "stand-in"})

    transport = httpx.MockTransport(record)
    with AgentClient("http://agent", Secret("t"), transport=transport,
                     read_deadline_s=0.4) as client:  # fmt: skip
        for call in (client.status, client.operations, lambda: client.plan(ratio=4)):
            with pytest.raises(AgentError):
                call()
    assert seen["/v1/status"] == {"connect": 0.4, "read": 0.4, "write": 0.4, "pool": 0.4}
    assert seen["/v1/operations"] == seen["/v1/status"]
    assert seen["/v1/plans"] == {"connect": 15.0, "read": 15.0, "write": 15.0, "pool": 15.0}


def test_the_long_poll_sends_after_and_a_bounded_wait() -> None:
    """events() asks for the events after SEQ and cuts the wait to the agent's 60 s."""
    seen: list[httpx.Request] = []
    fixture = Path(__file__).parents[1] / "fixtures" / "agent_events" / "resize_ratio4_ready.json"
    body = json.loads(fixture.read_text(encoding="utf-8"))

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=body)

    with AgentClient("http://agent", Secret("t"), transport=httpx.MockTransport(answer)) as client:
        page = client.events(3, after=12, wait_s=600)
    assert seen[0].url.params["after"] == "12"
    assert float(seen[0].url.params["wait"]) == 60.0
    assert seen[0].headers["authorization"] == "Bearer t"
    assert page.events[-1].phase is EventPhase.READY
    assert page.operation.state is OperationState.READY


def test_an_idle_connection_is_dropped_before_the_agents_server_closes_it() -> None:
    """The client reuses an idle connection for less time than the agent's uvicorn keeps one
    open (its default ``timeout_keep_alive``, which the agent does not change), so no request
    goes out on a connection the agent is closing."""
    agent_keeps_s = uvicorn.Config("bot.agent.http.app:create_app").timeout_keep_alive
    assert agent_keeps_s > KEEPALIVE_S
