"""The Slack app in HTTP mode, end to end: signed requests to the real Bolt app on uvicorn, Web
API calls to the stand-in, a real agent on the simulator, a real store."""

from __future__ import annotations

import pytest

from bot.store import RevisionOutcome, Store
from bot.testing import SlackApiStandIn, SlackRequestSigner
from tests.chat.conftest import RunningAgent
from tests.slack._harness import (
    ANA,
    APPLY,
    BEN,
    CHANNEL,
    SIGNING_SECRET,
    http_bot,
    posted_proposal_id,
    proposal_message,
    settings_for,
    text_of,
    top_level,
    wait_until,
)

# The field notes: ratio 4 on the 8-GPU host is 159,274 x 4 + one page = 637,097 host tokens
# per rank, at (512 + 64) x 61 layers x 2 bytes = 70,272 B per token: 44.77 GB per rank.
HOST_TOKENS = 159_274 * 4 + 1
GB_PER_RANK = f"{HOST_TOKENS * 70_272 / 1e9:.2f}"


@pytest.mark.slow
def test_resize_apply_progress_ready_and_history(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """/kimi resize ratio 4 posts a proposal with buttons; Apply turns that message into the
    live progress, edited until it shows the final figures; a thread reply tells both people;
    history shows the revision ready with planned and logged GB."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    with http_bot(slack, settings_for(kimi_agent.url), store) as bot:
        bot.command("resize ratio 4", BEN, signer)
        proposal_id = posted_proposal_id(slack)
        posted = proposal_message(slack, proposal_id)
        assert GB_PER_RANK in text_of(posted)
        assert f"{HOST_TOKENS:,}" in text_of(posted)
        assert [b["type"] for b in posted.blocks].count("actions") == 1
        bot.click(APPLY, proposal_id, ANA, signer)
        wait_until(
            lambda: "READY" in text_of(slack.message(CHANNEL, posted.ts) or {}),
            timeout=90,
            what="the progress message to end ready",
        )
        final = slack.message(CHANNEL, posted.ts)
        assert final is not None
        assert final.edits >= 3
        assert "actions" not in [b["type"] for b in final.blocks]
        assert f"{HOST_TOKENS:,}" in text_of(final)
        assert GB_PER_RANK in text_of(final)
        wait_until(lambda: bool(slack.replies(CHANNEL, posted.ts)), what="the thread notice")
        (notice,) = slack.replies(CHANNEL, posted.ts)
        assert f"<@{BEN}>" in notice.text
        assert f"<@{ANA}>" in notice.text
        assert "is ready" in notice.text
        before = len(top_level(slack))
        bot.command("history", BEN, signer)
        wait_until(lambda: len(top_level(slack)) > before, what="the history message")
        table = text_of(top_level(slack)[-1])
        assert "ratio 4" in table
        assert "ready" in table
        assert GB_PER_RANK in table
    revision = store.history("kimi-01", 1)[0]
    assert revision.outcome is RevisionOutcome.READY
    assert revision.applied_by == ANA
    assert revision.proposed_by == BEN
