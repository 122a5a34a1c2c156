"""``rollback N [host]`` against two real agents on the simulator: one revision number (the
history's) from the command to the agent, refusals for another host's or an unknown revision,
and a rollback that is proposed, says what it returns to and waits for Apply."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.chat.core import ChatCore
from bot.chat.policy import Actor
from bot.chat.replies import HistoryReply, OperationReply, ProblemReply, ProposalReply
from bot.store import RevisionOutcome, Store
from bot.terminal.wording import reply_lines
from bot.vocab import OperationState
from tests.chat._core_fixtures import (
    RecordingFrontEnd,
    chat_settings,
    migrated_store,
    propose_and_apply,
    running_core,
)
from tests.chat.conftest import RunningAgent, SimHost, agent_on_sim

ANA, BEN = Actor("ana"), Actor("ben")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with migrated_store(tmp_path) as the_store:
        yield the_store


@pytest.fixture
def two_agents(tmp_path: Path) -> Iterator[tuple[RunningAgent, RunningAgent]]:
    """kimi-01 and kimi-02, each on its own simulator, both serving ratio 2."""
    with (
        agent_on_sim(tmp_path / "kimi-01", SimHost(host_name="kimi-01")) as first,
        agent_on_sim(tmp_path / "kimi-02", SimHost(host_name="kimi-02")) as second,
    ):
        yield first, second


def _effective(agent: RunningAgent) -> str:
    with agent.http() as http:
        effective: str = http.get("/v1/status").json()["config"]["effective"]
    return effective


def _change(core: ChatCore, command: str) -> int:
    """Propose ``command`` as ben, apply it as ana, wait for ready; the history's revision id."""
    started = propose_and_apply(core, command, BEN, ANA)
    final = core.wait(started.watch, timeout_s=120)
    assert final is not None
    assert final.state is OperationState.READY, final
    history = core.handle("history 1 " + started.watch.host, BEN)
    assert isinstance(history, HistoryReply)
    return history.entries[0].id


@pytest.mark.slow
def test_rollback_n_returns_to_the_history_s_revision_n_on_two_hosts(
    two_agents: tuple[RunningAgent, RunningAgent], store: Store
) -> None:
    """The history's revision of kimi-01's ratio 3 is 1, kimi-01's agent calls it 4, and 4 is
    also kimi-02's agent's ratio 3.5: rollback 1 kimi-01 proposes ratio 3 (not the agent's
    revision 1, the size 48 it first ran), and after Apply kimi-01 runs ratio 3, the rollback
    recorded with rollback_of and returned_to. Failed before the fix: the bot sent 1 to the
    agent and started at once."""
    first, second = two_agents
    settings = chat_settings({"kimi-01": first.url, "kimi-02": second.url})
    with running_core(settings, store, RecordingFrontEnd()) as core:
        ratio_3 = _change(core, "resize ratio 3 kimi-01")
        ratio_35 = _change(core, "resize ratio 3.5 kimi-02")
        ratio_4 = _change(core, "resize ratio 4 kimi-01")
        # The history numbers every host's revisions in one sequence; each agent its own.
        assert len({ratio_3, ratio_35, ratio_4}) == 3
        agent_3 = store.revision(ratio_3).agent_revision_id
        assert agent_3 == store.revision(ratio_35).agent_revision_id != ratio_3

        proposal = core.handle(f"rollback {ratio_3} kimi-01", BEN)
        assert isinstance(proposal, ProposalReply), proposal
        assert proposal.rollback is not None
        head = reply_lines(proposal)[0]
        assert head.startswith(
            f"Proposal #{proposal.id}: Roll back kimi-01 to revision {ratio_3}: ratio 3 x device "
            "pool "
            "(applied by ana on "
        ), head
        assert "kimi-ops chat apply" in "\n".join(reply_lines(proposal))
        # Nothing started yet: the host still runs ratio 4.
        assert store.history("kimi-01", 1)[0].outcome is RevisionOutcome.PROPOSED
        assert _effective(first).startswith("ratio 4")

        started = core.handle(f"apply {proposal.id}", ANA)
        assert isinstance(started, OperationReply), started
        assert started.watch.title.startswith(f"Roll back kimi-01 to revision {ratio_3}: ")
        assert (started.watch.proposed_by, started.watch.applied_by) == ("ben", "ana")
        final = core.wait(started.watch, timeout_s=120)
        assert final is not None
        assert final.state is OperationState.READY, final
    assert _effective(first).startswith("ratio 3")
    rollback = store.history("kimi-01", 1)[0]
    assert rollback.outcome is RevisionOutcome.READY
    assert (rollback.returned_to, rollback.rollback_of) == (ratio_3, ratio_4)
    assert rollback.settings.ratio == 3
    assert store.revision(ratio_4).outcome is RevisionOutcome.ROLLED_BACK
    assert rollback.agent_returned_to == store.revision(ratio_3).agent_revision_id


@pytest.mark.slow
def test_rollback_refuses_another_host_s_revision_and_an_unknown_one(
    two_agents: tuple[RunningAgent, RunningAgent], store: Store
) -> None:
    """rollback 1 kimi-02 where revision 1 is kimi-01's, and rollback 99, are refused with a
    sentence naming why, and nothing is proposed or started on either host. Failed before the
    fix: the agent of kimi-02 read 1 as its own revision 1 and rolled back to it."""
    first, second = two_agents
    settings = chat_settings({"kimi-01": first.url, "kimi-02": second.url})
    with running_core(settings, store, RecordingFrontEnd()) as core:
        _change(core, "resize ratio 3 kimi-01")
        other = core.handle("rollback 1 kimi-02", ANA)
        unknown = core.handle("rollback 99", ANA)
    assert isinstance(other, ProblemReply), other
    assert other.text == (
        "revision 1 is kimi-01's (ratio 3), not kimi-02's; 'history kimi-02' lists "
        "kimi-02's revisions"
    )
    assert isinstance(unknown, ProblemReply), unknown
    assert unknown.text == "there is no revision 99 in the history; 'history' lists them"
    assert [r for r in store.history(None, 10) if r.outcome is RevisionOutcome.PROPOSED] == []
    with second.http() as http:
        operations = http.get("/v1/operations").json()["operations"]
    assert all(op["actor"] == "setup" for op in operations)
