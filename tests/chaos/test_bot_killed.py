"""The bot SIGKILLed mid-operation and started again on the same store: the operation's Slack
message (same channel and ts) is finished, and no second operation starts."""

from __future__ import annotations

import pytest

from bot.vocab import EventPhase
from tests.chaos._rig import ANA, CHANNEL, ChaosRig, check_agreement, proposal_id
from tests.slack._harness import top_level, wait_ephemeral, wait_until

_LOADING = {EventPhase.LOAD_WEIGHTS, EventPhase.KV_POOL, EventPhase.CUDA_GRAPH}


def _phase(rig: ChaosRig, agent_id: int) -> EventPhase | None:
    with rig.agent_http() as http:
        events = http.get(f"/v1/operations/{agent_id}").json()["events"]
    return EventPhase(events[-1]["phase"]) if events else None


@pytest.mark.slow
def test_a_bot_killed_while_the_server_starts_finishes_the_same_message(rig: ChaosRig) -> None:
    """SIGKILL while the new server loads its weights; the bot started again edits the same
    message to READY, posts no new top-level message, and the agent ran one operation."""
    posted = rig.propose()
    rig.click_apply(proposal_id(posted), ANA)
    wait_until(lambda: len(rig.agent_operations()) == 1, what="the operation at the agent")
    (started,) = rig.agent_operations()
    wait_until(
        lambda: _phase(rig, started["id"]) in _LOADING,
        timeout=60,
        what="the new server to be loading",
    )
    wait_until(lambda: (rig.slack.message(CHANNEL, posted.ts) or posted).edits > 0)
    rig.bot.kill()
    assert rig.store.operation_by_agent_id("kimi-01", started["id"]) is not None
    messages = len(top_level(rig.slack))
    rig.bot.start()
    rig.wait_message(posted.ts, "*READY*")
    assert len(top_level(rig.slack)) == messages
    (only,) = check_agreement(rig)
    assert only["id"] == started["id"]


@pytest.mark.slow
def test_a_bot_killed_before_it_heard_the_agent_accept_finishes_the_same_message(
    rig: ChaosRig,
) -> None:
    """SIGKILL after the agent accepted the operation but before the bot read its answer (the
    link holds it): the bot started again finds the operation, finishes the proposal's message,
    and a second Apply on that proposal starts nothing."""
    posted = rig.propose()
    rig.apply_unheard(proposal_id(posted), ANA)
    rig.bot.kill()
    rig.bot.start()
    rig.wait_message(posted.ts, "*READY*")
    again = rig.click_apply(proposal_id(posted), ANA)
    assert "already applied" in wait_ephemeral(rig.slack, again)
    (only,) = check_agreement(rig, refusals=1)
    assert len(rig.agent_operations()) == 1
    assert only["actor"] == ANA
