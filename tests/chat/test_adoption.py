"""Applies whose answer the bot lost, found again at the agent by a running bot's sweep: the real
agent on the simulator behind a TCP link the test cuts, a real migrated store, the core in
process with a clock whose sleeps pass at once (the apply's patience of minutes is the logic
under test, not something to wait out)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.chat.adoption import ABANDONED_AFTER, adopt_abandoned
from bot.chat.core import ChatCore
from bot.chat.policy import Actor
from bot.chat.replies import ProblemReply, ProposalReply, Reply
from bot.store import RevisionOutcome, Store
from bot.vocab import OperationState
from tests.chaos._bot_link import AgentLink
from tests.chat._core_fixtures import (
    RecordingFrontEnd,
    chat_settings,
    migrated_store,
    running_core,
)
from tests.chat.conftest import RunningAgent, SimHost, agent_on_sim, free_port
from tests.slack._harness import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HOST = "kimi-01"
ANA, BEN = Actor("ana"), Actor("ben")


class SkippingClock:
    """Real time plus what the test and every ``sleep`` add: a sleep moves the clock on at
    once instead of waiting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shift = 0.0

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._shift += seconds

    def now(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + timedelta(seconds=self._shift)

    def monotonic(self) -> float:
        with self._lock:
            return time.monotonic() + self._shift

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        time.sleep(0.001)  # let other threads run


@dataclass
class Linked:
    agent: RunningAgent
    link: AgentLink
    store: Store
    core: ChatCore
    clock: SkippingClock


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[Linked]:
    """The field notes' host serving size 48, its agent on a fixed port, a link to it, and the
    core over a migrated store with the skipping clock."""
    host = SimHost(serving_ratio=None, listen_port=free_port())
    clock = SkippingClock()
    with agent_on_sim(tmp_path / HOST, host) as agent:
        link = AgentLink(host.listen_port)
        store = migrated_store(tmp_path)
        try:
            with running_core(
                chat_settings({HOST: link.url}), store, RecordingFrontEnd(), clock=clock
            ) as core:
                yield Linked(agent, link, store, core, clock)
        finally:
            link.close()
            store.close()


def _propose(linked: Linked) -> ProposalReply:
    proposal = linked.core.handle("resize ratio 4", BEN)
    assert isinstance(proposal, ProposalReply), proposal
    assert proposal.plan.fits, proposal.plan.reason
    return proposal


def _applied_at_agent(linked: Linked) -> dict[str, Any] | None:
    """The operation ana's Apply started at the agent, read straight from it (not the link)."""
    with linked.agent.http() as http:
        found = http.get("/v1/operations").json()["operations"]
    mine = [op for op in found if op["actor"] == ANA.id]
    assert len(mine) <= 1, mine
    return mine[0] if mine else None


def _outcome(store: Store, proposal: ProposalReply) -> RevisionOutcome:
    return store.revision(store.proposal(proposal.id).revision_id).outcome


def test_an_apply_whose_answer_was_lost_is_watched_by_a_later_sweep(linked: Linked) -> None:
    """The link cut after the agent accepted the Apply and kept cut past the apply's patience:
    the apply gives up, a sweep leaves the claim alone while it is young or the agent silent,
    and once the link is back a sweep records the operation as the proposal's and watches it to
    ready."""
    proposal = _propose(linked)
    linked.link.hold_answers_to(b"POST /v1/operations ")
    answers: list[Reply] = []
    apply = threading.Thread(
        target=lambda: answers.append(linked.core.handle(f"apply {proposal.id}", ANA))
    )
    apply.start()
    assert linked.link.held.wait(60), "the Apply never reached the agent"
    wait_until(lambda: _applied_at_agent(linked) is not None, what="the agent to accept")
    linked.link.cut()
    apply.join(timeout=120)
    assert not apply.is_alive(), "the apply did not give up with the link cut"
    (answer,) = answers
    assert isinstance(answer, ProblemReply), answer
    (claimed,) = linked.core.context.audit.applied_unstarted()
    assert claimed.id == proposal.id

    # Young: the apply that made the claim may still be asking; the agent is not even asked.
    refused_before = linked.link.refused
    assert adopt_abandoned(linked.core.context) == []
    assert linked.link.refused == refused_before
    # Old but the agent silent: left for the next sweep, not settled.
    linked.clock.advance(ABANDONED_AFTER.total_seconds() + 1)
    assert adopt_abandoned(linked.core.context) == []
    assert linked.link.refused > refused_before, "the sweep never asked the agent"
    assert _outcome(linked.store, proposal) is RevisionOutcome.APPLIED

    linked.link.restore()
    (watch,) = adopt_abandoned(linked.core.context)
    started = _applied_at_agent(linked)
    assert started is not None
    assert watch.operation_id == started["id"]
    assert (watch.proposed_by, watch.applied_by) == (BEN.id, ANA.id)
    final = linked.core.wait(watch, timeout_s=120)
    assert final is not None, "the adopted operation was not watched to its end"
    assert final.state is OperationState.READY
    record = linked.store.operation_by_agent_id(HOST, started["id"])
    assert record is not None
    assert record.revision_id == linked.store.proposal(proposal.id).revision_id
    assert linked.core.context.audit.applied_unstarted() == []
    assert adopt_abandoned(linked.core.context) == [], "adopted twice"


def test_a_claim_the_agent_ran_nothing_for_is_settled_refused(linked: Linked) -> None:
    """A proposal claimed by an apply that never reached the agent (the bot stopped between its
    claim and its request): once abandoned, the sweep asks the agent, finds no operation, and
    settles the proposal refused, so no later sweep asks again."""
    proposal = _propose(linked)
    linked.core.context.audit.claim_apply(proposal.id, ANA.id, linked.clock.now())
    assert _outcome(linked.store, proposal) is RevisionOutcome.APPLIED
    linked.clock.advance(ABANDONED_AFTER.total_seconds() + 1)
    assert adopt_abandoned(linked.core.context) == []
    assert _outcome(linked.store, proposal) is RevisionOutcome.REFUSED
    assert linked.core.context.audit.applied_unstarted() == []
    with linked.agent.http() as http:
        assert [op["actor"] for op in http.get("/v1/operations").json()["operations"]] == ["setup"]
