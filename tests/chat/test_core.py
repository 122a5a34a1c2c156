"""The core service against a real agent on the simulator and a real SQLite store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from bot.chat.core import ChatCore
from bot.chat.policy import Actor, RefusalKind
from bot.chat.replies import (
    HostsReply,
    OperationReply,
    ProblemReply,
    ProposalReply,
    RefusalReply,
    Reply,
    StatusReply,
    UsageReply,
)
from bot.store import Store
from bot.vocab import EventPhase, OperationState
from tests.chat._core_fixtures import (
    RecordingFrontEnd,
    ShiftedClock,
    chat_settings,
    migrated_store,
    propose_and_apply,
    running_core,
)
from tests.chat.conftest import RunningAgent, free_port

_R = TypeVar("_R")
ANA, BEN, EVE = Actor("ana"), Actor("ben"), Actor("eve")
# The field notes: ratio 4 on the 8-GPU host is 159,274 x 4 + one page = 637,097 host tokens per
# rank; with the model's config (MLA: (512 + 64) x 61 layers x 2 bytes = 70,272 B/token) the plan
# is SGLang's own figure, 44.77 GB per rank, as the log then says.
PLANNED_GB = LOGGED_GB = round((159_274 * 4 + 1) * (512 + 64) * 61 * 2 / 1e9, 2)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with migrated_store(tmp_path) as the_store:
        yield the_store


def _as(reply: Reply, kind: type[_R]) -> _R:
    assert isinstance(reply, kind), reply
    return reply


def _operations(agent: RunningAgent) -> int:
    with agent.http() as http:
        return len(http.get("/v1/operations", params={"limit": 500}).json()["operations"])


@pytest.mark.slow
def test_resize_apply_watch_to_ready_and_history(kimi_agent: RunningAgent, store: Store) -> None:
    """ben proposes ratio 4, ana applies: the watcher hands on views to ready, notifies both, and
    history shows the revision ready with 44.77 GB planned beside 44.77 logged."""
    front = RecordingFrontEnd()
    settings = chat_settings({"kimi-01": kimi_agent.url})
    with running_core(settings, store, front) as core:
        proposal = _as(core.handle("resize ratio 4", BEN), ProposalReply)
        assert proposal.plan.fits
        assert proposal.plan.per_rank_gb == pytest.approx(PLANNED_GB, abs=0.01)
        assert proposal.current == "ratio 2 x device pool"
        started = _as(core.handle(f"apply {proposal.id}", ANA), OperationReply)
        final = core.wait(started.watch, timeout_s=120)
    assert final is not None
    assert final.state is OperationState.READY
    assert final.final is not None
    assert final.final.host_gb_per_rank == pytest.approx(LOGGED_GB, abs=0.005)
    phases = [view.phase for _, view in front.views]
    assert phases[-1] is EventPhase.READY
    assert EventPhase.LOAD_WEIGHTS in phases
    seqs = [view.last_seq for _, view in front.views]
    assert seqs == sorted(seqs)
    assert [(people, view.state) for people, _, view in front.notices] == [
        (("ben", "ana"), OperationState.READY)
    ]
    entry = store.history("kimi-01", 1)[0]
    assert entry.outcome.value == "ready"
    assert entry.proposed_by == "ben"
    assert entry.applied_by == "ana"
    assert entry.plan.per_rank_gb == pytest.approx(PLANNED_GB, abs=0.01)
    assert entry.host_gb_per_rank == pytest.approx(LOGGED_GB, abs=0.005)
    record = store.operation_by_agent_id("kimi-01", started.operation.id)
    assert record is not None
    assert record.finished_at is not None
    stored = store.operation_events(record.id)
    assert [event.seq for event in stored] == list(range(1, len(stored) + 1))


@pytest.mark.slow
def test_two_applies_at_once_start_one_operation(kimi_agent: RunningAgent, store: Store) -> None:
    """ana and ben apply the same proposal at the same moment: one operation starts, the other
    is told who applied it."""
    front = RecordingFrontEnd()
    settings = chat_settings({"kimi-01": kimi_agent.url})
    before = _operations(kimi_agent)
    with running_core(settings, store, front) as core:
        proposal = _as(core.handle("resize ratio 4", EVE), ProposalReply)
        gate = threading.Barrier(2)
        replies: dict[str, Reply] = {}

        def apply(actor: Actor) -> None:
            gate.wait()
            replies[actor.id] = core.handle(f"apply {proposal.id}", actor)

        threads = [threading.Thread(target=apply, args=(who,)) for who in (ANA, BEN)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        won = [who for who, reply in replies.items() if isinstance(reply, OperationReply)]
        lost = [reply for reply in replies.values() if isinstance(reply, RefusalReply)]
        assert len(won) == 1, replies
        assert len(lost) == 1, replies
        assert lost[0].refusal.kind is RefusalKind.LOCKED
        assert f"already applied by {won[0]}" in lost[0].text
        winner = replies[won[0]]
        assert isinstance(winner, OperationReply)
        core.wait(winner.watch, timeout_s=120)
    assert _operations(kimi_agent) == before + 1
    assert len(store.refusals(user_id=next(iter({"ana", "ben"} - set(won))))) == 1


@pytest.mark.slow
def test_a_refused_plan_and_an_unauthorized_apply_are_answered_and_recorded(
    kimi_agent: RunningAgent, store: Store
) -> None:
    """size 300 is a proposal with the planner's arithmetic and nothing to apply; eve may not
    apply; each refusal is recorded and no operation starts."""
    front = RecordingFrontEnd()
    settings = chat_settings({"kimi-01": kimi_agent.url})
    before = _operations(kimi_agent)
    with running_core(settings, store, front) as core:
        refused = _as(core.handle("resize size 300", BEN), ProposalReply)
        assert not refused.plan.fits
        # 8 ranks x 300 GB = 2,400 GB, far over the 449 GB host.
        assert refused.plan.total_gb == pytest.approx(8 * 300, rel=1e-3)
        assert "2400.0 GB" in refused.plan.reason
        over = _as(core.handle(f"apply {refused.id}", ANA), RefusalReply)
        assert over.refusal.kind is RefusalKind.OVER_BUDGET
        fits = _as(core.handle("resize ratio 4", BEN), ProposalReply)
        denied = _as(core.handle(f"apply {fits.id}", EVE), RefusalReply)
        assert denied.refusal.kind is RefusalKind.UNAUTHORIZED
    assert _operations(kimi_agent) == before
    kinds = sorted(r.reason.split(":")[0] for r in store.refusals(host="kimi-01"))
    assert kinds == ["over_budget", "unauthorized"]


@pytest.mark.slow
def test_a_bot_restarted_mid_watch_resumes_from_the_store(
    kimi_agent: RunningAgent, store: Store
) -> None:
    """The core closes while the operation loads weights; a new core resumes the watch from the
    stored seq and records the end, with every event stored once."""
    settings = chat_settings({"kimi-01": kimi_agent.url})
    first_front = RecordingFrontEnd()
    with running_core(settings, store, first_front) as core:
        started = propose_and_apply(core, "resize ratio 4", BEN, ANA)
    # Closed at once: the operation goes on at the agent.
    record = store.operation_by_agent_id("kimi-01", started.operation.id)
    assert record is not None
    assert record.finished_at is None
    second_front = RecordingFrontEnd()
    with running_core(settings, store, second_front) as core:
        resumed = core.resume()
        assert [w.operation_id for w in resumed] == [started.operation.id]
        final = core.wait(resumed[0], timeout_s=120)
    assert final is not None
    assert final.state is OperationState.READY
    record = store.operation(record.id)
    assert record.finished_at is not None
    stored = store.operation_events(record.id)
    assert [event.seq for event in stored] == list(range(1, len(stored) + 1))
    assert store.history("kimi-01", 1)[0].outcome.value == "ready"


@pytest.mark.slow
def test_status_and_hosts_list_a_silent_host(kimi_agent: RunningAgent, store: Store) -> None:
    """With a second host nobody answers for, status and hosts list both, the silent one with
    its problem and since when."""
    settings = chat_settings(
        {"kimi-01": kimi_agent.url, "kimi-02": f"http://127.0.0.1:{free_port()}"}
    )
    with running_core(settings, store, RecordingFrontEnd()) as core:
        status = _as(core.handle("status", BEN), StatusReply)
        hosts = _as(core.handle("hosts", BEN), HostsReply)
    for reply in (status.hosts, hosts.hosts):
        by_name = {answer.host: answer for answer in reply}
        assert set(by_name) == {"kimi-01", "kimi-02"}
        assert by_name["kimi-01"].status is not None
        assert by_name["kimi-01"].problem is None
        assert by_name["kimi-02"].status is None
        assert "kimi-02" in (by_name["kimi-02"].problem or "")
        assert by_name["kimi-02"].since is not None
    assert status.hosts[0].host == "kimi-01"  # the default first


def test_a_parse_error_never_calls_an_agent(tmp_path: Path) -> None:
    """Bad input is a usage reply and no request reaches the agent."""
    calls: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(500)

    settings = chat_settings({"kimi-01": "http://agent"})
    transports = {"kimi-01": httpx.MockTransport(record)}
    with (
        migrated_store(tmp_path) as store,
        running_core(settings, store, RecordingFrontEnd(), transports=transports) as core,
    ):
        for text in ("resize ratio abc", "resize size 44.5", "stauts", "x" * 2000, "status zz"):
            assert isinstance(core.handle(text, BEN), UsageReply)
        assert isinstance(core.handle("apply 999", BEN), ProblemReply)
    assert calls == []


def test_core_handles_are_plain_replies_to_the_front_end(tmp_path: Path) -> None:
    """Every reply handle() returns is also handed to the front end, for the asking actor."""
    front = RecordingFrontEnd()
    settings = chat_settings({"kimi-01": "http://agent"})
    with migrated_store(tmp_path) as store, running_core(settings, store, front) as core:
        reply = core.handle("help", BEN)
    assert front.replies == [("ben", reply)]
    assert isinstance(core, ChatCore)


@pytest.mark.slow
def test_expired_and_void_proposals_are_refused_and_recorded(
    kimi_agent: RunningAgent, store: Store
) -> None:
    """A proposal applied 15 minutes on is expired (and stays so); one made before another
    operation ran on the host is void; both refusals are recorded and start nothing."""
    clock = ShiftedClock()
    settings = chat_settings({"kimi-01": kimi_agent.url})
    with running_core(settings, store, RecordingFrontEnd(), clock=clock) as core:
        old = _as(core.handle("resize ratio 4", BEN), ProposalReply)
        void = _as(core.handle("resize ratio 3", BEN), ProposalReply)
        kimi_agent.run_to_end({"kind": "restart", "actor": "someone-else"})
        before = _operations(kimi_agent)
        stale = _as(core.handle(f"apply {void.id}", ANA), RefusalReply)
        assert stale.refusal.kind is RefusalKind.STALE
        assert "another operation started on kimi-01" in stale.text
        clock.shift = timedelta(minutes=15)
        expired = _as(core.handle(f"apply {old.id}", ANA), RefusalReply)
        assert expired.refusal.kind is RefusalKind.EXPIRED
        clock.shift = timedelta()
        again = _as(core.handle(f"apply {old.id}", ANA), RefusalReply)
        assert again.refusal.kind is RefusalKind.EXPIRED
    assert _operations(kimi_agent) == before
    outcomes = {entry.id: entry.outcome.value for entry in store.history("kimi-01", 10)}
    assert list(outcomes.values()).count("expired") == 2
    kinds = sorted(r.reason.split(":")[0] for r in store.refusals(host="kimi-01"))
    assert kinds == ["expired", "expired", "stale"]
