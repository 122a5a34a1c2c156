"""Slack under strain: the Web API stand-in answers 429 (Retry-After 1) to a third of the bot's
calls and 500 to a tenth, from a seeded draw. Every operation's message still reaches its final
state, and nothing is posted twice."""

from __future__ import annotations

import pytest

from bot.testing import StoredMessage
from tests.chaos._rig import ANA, BEN, CHANNEL, ChaosRig, check_agreement, proposal_id
from tests.slack._harness import (
    ephemerals,
    posted_proposal_id,
    proposal_message,
    top_level,
    wait_until,
)

#: The calls a proposal and its operation make (the ephemerals go to response_url, not here).
_METHODS = ("chat.postMessage", "chat.update", "chat.postEphemeral")
_SHARES = {429: 1 / 3, 500: 1 / 10}


def _propose(rig: ChaosRig, text: str) -> StoredMessage:
    """Ask until the proposal is posted, as a person told "could not post" asks again."""
    for _ in range(6):
        before = len(top_level(rig.slack))
        url = rig.command(text, BEN)
        if _posted_or_told(rig, before, url):
            return proposal_message(rig.slack, posted_proposal_id(rig.slack, before))
        assert "could not post" in ephemerals(rig.slack, url)[0]
    raise AssertionError("six proposals in a row were not posted")


def _posted_or_told(rig: ChaosRig, before: int, url: str) -> bool:
    """Wait until the proposal is posted (True) or its sender told it was not (False)."""
    wait_until(
        lambda: len(top_level(rig.slack)) > before or bool(ephemerals(rig.slack, url)),
        timeout=60,
        what="the proposal posted, or its sender told why not",
    )
    return len(top_level(rig.slack)) > before


@pytest.mark.slow
@pytest.mark.parametrize("seed", [pytest.param(3, id="seed=3")])
def test_every_message_ends_under_429s_and_500s(rig: ChaosRig, seed: int) -> None:
    """Two resizes one after the other, each proposal and progress call drawn against a third
    429 and a tenth 500 (seed printed): both messages end READY with the final figures, each
    thread has its ready notice once, and the store and agent agree."""
    for method in _METHODS:
        rig.slack.faults.fail_shares(method, _SHARES, retry_after=1, seed=seed)
    for text in ("resize ratio 4", "resize ratio 3"):
        posted = _propose(rig, text)
        rig.click_apply(proposal_id(posted), ANA)
        rig.wait_message(posted.ts, "*READY*", timeout_s=150)
        wait_until(
            lambda ts=posted.ts: any("is ready" in r.text for r in rig.slack.replies(CHANNEL, ts)),
            timeout=60,
            what="the ready notice",
        )
    statuses = {call.status for method in _METHODS for call in rig.slack.calls(method)}
    assert {429, 500} <= statuses, f"the seed drew no fault of some kind: {statuses}"
    operations = check_agreement(rig)
    assert len(operations) == 2
