"""[policy] usergroups through the Slack app in HTTP mode: the group's members are read with
usergroups.users.list on the stand-in; a member may apply, a non-member is refused, and a group
that cannot be read refuses rather than grants. A real agent on the simulator, a real store."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.chat.config import PolicySettings
from bot.store import RevisionOutcome, Store
from bot.testing import SlackApiStandIn, SlackRequestSigner
from tests.chat.conftest import RunningAgent
from tests.slack._harness import (
    ANA,
    APPLY,
    BEN,
    CHANNEL,
    EVE,
    SIGNING_SECRET,
    http_bot,
    posted_proposal_id,
    proposal_message,
    settings_for,
    text_of,
    wait_ephemeral,
    wait_until,
)

SIGNER = SlackRequestSigner(SIGNING_SECRET)
ONCALL = "S0ONCALL"


@pytest.mark.slow
def test_group_members_apply_others_are_refused_and_an_unread_group_grants_nothing(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """With nobody in appliers and the on-call group allowed: eve (not a member) is refused,
    ana (a member) is refused while the group cannot be read, then applies once it can; each
    refusal is ephemeral and recorded, and only ana's last click starts the operation."""
    base = settings_for(kimi_agent.url)
    settings = replace(base, policy=PolicySettings(usergroups=frozenset({ONCALL})))
    slack.set_usergroup(ONCALL, (ANA, "U0CAT"))
    # A TTL of 0 reads the group on every click, so the failure below meets a fresh read.
    with http_bot(slack, settings, store, groups_ttl_s=0.0) as bot:
        bot.command("resize ratio 4", BEN, SIGNER)
        pid = posted_proposal_id(slack)
        posted = proposal_message(slack, pid)
        denied = wait_ephemeral(slack, bot.click(APPLY, pid, EVE, SIGNER))
        assert f"{EVE} may not apply" in denied
        assert "could not be read" not in denied
        slack.faults.fail_next("usergroups.users.list", 1, status=500)
        unread = wait_ephemeral(slack, bot.click(APPLY, pid, ANA, SIGNER))
        assert f"{ANA} may not apply" in unread
        assert f"user group {ONCALL} could not be read" in unread
        recorded = {r.user_id: r.reason for r in store.refusals()}
        assert sorted(recorded) == [ANA, EVE]
        assert "could not be read" in recorded[ANA]
        assert "could not be read" not in recorded[EVE]
        assert store.history("kimi-01", 1)[0].outcome is RevisionOutcome.PROPOSED
        bot.click(APPLY, pid, ANA, SIGNER)
        wait_until(
            lambda: "READY" in text_of(slack.message(CHANNEL, posted.ts) or {}),
            timeout=90,
            what="the member's operation to end ready",
        )
    asked = [call.body.get("usergroup") for call in slack.calls("usergroups.users.list")]
    assert asked == [ONCALL] * 4  # ben's resize, eve, ana unread, ana
    revision = store.history("kimi-01", 1)[0]
    assert revision.applied_by == ANA
    assert revision.outcome is RevisionOutcome.READY
    assert len(store.refusals()) == 2
