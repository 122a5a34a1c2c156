"""Two people click Apply on two different proposals for one host within the same second:
exactly one operation runs, the other person is told why not, and the refusal is recorded."""

from __future__ import annotations

import threading

import pytest

from bot.store import RevisionOutcome
from tests.chaos._rig import ANA, BEN, CHANNEL, ChaosRig, check_agreement, proposal_id
from tests.slack._harness import ephemerals, wait_until


@pytest.mark.slow
def test_two_applies_of_two_proposals_in_one_second_run_one_operation(rig: ChaosRig) -> None:
    """ana applies ratio 4 while ben applies ratio 3, released together by a barrier: the agent
    runs one operation, which ends ready in its own message; the other clicker gets one
    ephemeral refusal (busy or void), recorded once, and that proposal loses its buttons."""
    first, second = rig.propose(BEN, "resize ratio 4"), rig.propose(ANA, "resize ratio 3")
    clicks = {ANA: proposal_id(first), BEN: proposal_id(second)}
    barrier = threading.Barrier(len(clicks))
    urls: dict[str, str] = {}

    def click(user: str) -> None:
        barrier.wait(timeout=30)
        urls[user] = rig.click_apply(clicks[user], user)

    threads = [threading.Thread(target=click, args=(user,)) for user in clicks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(urls) == sorted(clicks), "a click was not acknowledged"
    wait_until(lambda: len(rig.agent_operations()) >= 1, what="an operation at the agent")
    (operation,) = rig.agent_operations()
    winner = operation["actor"]
    loser = next(user for user in clicks if user != winner)
    wait_until(lambda: bool(ephemerals(rig.slack, urls[loser])), what="the loser to be told")
    (told,) = ephemerals(rig.slack, urls[loser])
    assert "busy" in told or "is void" in told, told
    assert ephemerals(rig.slack, urls[winner]) == []
    won = first if winner == ANA else second
    lost = second if winner == ANA else first
    rig.wait_message(won.ts, "*READY*")
    wait_until(lambda: not _has_buttons(rig, lost.ts), what="the losing proposal's buttons removed")
    check_agreement(rig, refusals=1)
    (refusal,) = rig.store.refusals()
    assert refusal.user_id == loser
    lost_revision = rig.store.proposal(proposal_id(lost)).revision_id
    outcome = rig.store.revision(lost_revision).outcome
    assert outcome in (RevisionOutcome.REFUSED, RevisionOutcome.EXPIRED), outcome
    assert len(rig.agent_operations()) == 1


def _has_buttons(rig: ChaosRig, ts: str) -> bool:
    message = rig.slack.message(CHANNEL, ts)
    assert message is not None
    return any(block.get("type") == "actions" for block in message.blocks)
