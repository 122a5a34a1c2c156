"""The agent unreachable mid-operation (the link between bot and agent cut): the operation's
thread says the agent is not answering, and once the link is back the message catches up to
the operation's end. The operation itself goes on at the agent throughout. A link cut right
after the agent accepted an Apply is caught up by the apply itself, or, past its patience, by
the running bot's sweep (``bot.chat.adoption``)."""

from __future__ import annotations

import time

import pytest

from bot.chat.adoption import ABANDONED_AFTER
from bot.chat.change_commands import RECORD_PATIENCE_S
from bot.slack.service import DEFAULT_SWEEP_S
from bot.vocab import FINAL_OPERATION_STATES, OperationState
from tests.chaos._rig import ANA, CHANNEL, ChaosRig, check_agreement, proposal_id
from tests.slack._harness import ephemerals, text_of, wait_until

_UNREACHABLE = "agent unreachable since"


def _state(rig: ChaosRig, agent_id: int) -> OperationState:
    with rig.agent_http() as http:
        return OperationState(http.get(f"/v1/operations/{agent_id}").json()["state"])


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    "outage_s",
    [
        pytest.param(15, id="outage=15s"),
        pytest.param(120, id="outage=120s", marks=pytest.mark.long),
    ],
)
def test_a_cut_link_is_said_and_the_message_catches_up(rig: ChaosRig, outage_s: int) -> None:
    """Cut while the new server starts: one thread notice says the agent is unreachable, the
    message does not claim an end it cannot know, and after ``outage_s`` the link is restored
    and the message ends READY with every event stored."""
    posted = rig.propose()
    rig.click_apply(proposal_id(posted), ANA)
    wait_until(lambda: len(rig.agent_operations()) == 1, what="the operation at the agent")
    (operation,) = rig.agent_operations()
    wait_until(lambda: (rig.slack.message(CHANNEL, posted.ts) or posted).edits > 0)
    rig.link.cut()
    cut_at = time.monotonic()
    wait_until(
        lambda: any(_UNREACHABLE in r.text for r in rig.slack.replies(CHANNEL, posted.ts)),
        timeout=60,
        what="the thread to say the agent is unreachable",
    )
    # The outage is the fault itself: it lasts outage_s whatever the operation does meanwhile.
    wait_until(
        lambda: _state(rig, operation["id"]) in FINAL_OPERATION_STATES,
        timeout=120,
        what="the operation to end at the agent during the outage",
    )
    assert "*READY*" not in text_of(rig.slack.message(CHANNEL, posted.ts) or posted)
    time.sleep(max(0.0, outage_s - (time.monotonic() - cut_at)))
    assert "*READY*" not in text_of(rig.slack.message(CHANNEL, posted.ts) or posted)
    assert rig.link.refused > 0, "the bot never tried the agent during the outage"
    rig.link.restore()
    rig.wait_message(posted.ts, "*READY*", timeout_s=90)
    replies = [r.text for r in rig.slack.replies(CHANNEL, posted.ts)]
    assert sum(_UNREACHABLE in text for text in replies) == 1, replies
    wait_until(
        lambda: any("is ready" in r.text for r in rig.slack.replies(CHANNEL, posted.ts)),
        what="the ready notice",
    )
    (only,) = check_agreement(rig)
    assert only["id"] == operation["id"]


@pytest.mark.slow
def test_a_link_cut_before_the_accept_is_heard_still_watches_the_operation(rig: ChaosRig) -> None:
    """The link cut after the agent accepted an Apply but before its answer reached the bot:
    the bot asks the agent, finds the operation its Apply started, and the proposal's message
    ends READY (the proposal is not settled as refused)."""
    posted = rig.propose()
    rig.apply_unheard(proposal_id(posted), ANA)
    rig.link.cut()
    rig.link.restore()
    rig.wait_message(posted.ts, "*READY*")
    (only,) = check_agreement(rig)
    assert only["actor"] == ANA


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(900)
def test_an_apply_unheard_past_its_patience_is_watched_by_a_sweep(rig: ChaosRig) -> None:
    """The link cut after the agent accepted an Apply and kept cut past the apply's patience:
    the clicker is told the agent cannot be reached, and once the link is back the running
    bot's sweep finds the operation and the proposal's message ends READY, with no restart of
    the bot."""
    posted = rig.propose()
    rig.link.hold_answers_to(b"POST /v1/operations ")
    clicked = rig.click_apply(proposal_id(posted), ANA)
    assert rig.link.held.wait(30), "the Apply never reached the agent"
    wait_until(lambda: len(rig.agent_operations()) == 1, what="the operation at the agent")
    rig.link.cut()
    cut_at = time.monotonic()
    wait_until(
        lambda: bool(ephemerals(rig.slack, clicked)),
        timeout=RECORD_PATIENCE_S + 120,
        what="the clicker to be told",
    )
    assert "cannot be reached" in ephemerals(rig.slack, clicked)[0]
    # The outage is the fault itself: it outlasts the apply's patience, whatever happens.
    time.sleep(max(0.0, ABANDONED_AFTER.total_seconds() + 5 - (time.monotonic() - cut_at)))
    assert "*READY*" not in text_of(rig.slack.message(CHANNEL, posted.ts) or posted)
    rig.link.restore()
    rig.wait_message(posted.ts, "*READY*", timeout_s=DEFAULT_SWEEP_S + 120)
    (only,) = check_agreement(rig)
    assert only["actor"] == ANA
