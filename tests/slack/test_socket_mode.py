"""The Slack app in Socket Mode (the default): the headline flow over the Socket Mode stand-in,
reached through apps.connections.open, with Slack's disconnect and a reconnect mid-operation."""

from __future__ import annotations

import pytest

from bot.store import RevisionOutcome, Store
from bot.testing import SlackApiStandIn, SocketModeStandIn
from tests.chat.conftest import RunningAgent
from tests.slack._harness import (
    ANA,
    APPLY,
    BEN,
    CHANNEL,
    click_payload,
    posted_proposal_id,
    proposal_message,
    settings_for,
    socket_bot,
    text_of,
    top_level,
    wait_until,
)


@pytest.mark.slow
def test_resize_and_apply_over_socket_mode_survive_a_reconnect(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, socket_mode: SocketModeStandIn, store: Store
) -> None:
    """/kimi resize ratio 4 and Apply arrive as envelopes and are acked; Slack disconnects
    while the operation runs; the app reconnects through apps.connections.open, the same
    message still ends ready, and a command pushed after the reconnect (history) is handled."""
    with socket_bot(slack, socket_mode, settings_for(kimi_agent.url), store):
        sent = socket_mode.push_slash_command("resize ratio 4", user_id=BEN, channel_id=CHANNEL)
        socket_mode.wait_for_ack(sent.envelope_id)
        posted = proposal_message(slack, posted_proposal_id(slack))
        url = slack.new_response_url()
        click = socket_mode.push_interactive(click_payload(APPLY, _id(posted.text), ANA, url))
        socket_mode.wait_for_ack(click.envelope_id)
        opened = len(slack.calls("apps.connections.open"))
        socket_mode.disconnect()
        socket_mode.wait_for_connection(count=2, timeout=20)
        assert len(slack.calls("apps.connections.open")) > opened
        wait_until(
            lambda: "READY" in text_of(slack.message(CHANNEL, posted.ts) or {}),
            timeout=90,
            what="the operation's message to end ready",
        )
        before = len(top_level(slack))
        after = socket_mode.push_slash_command("history", user_id=BEN, channel_id=CHANNEL)
        socket_mode.wait_for_ack(after.envelope_id)
        wait_until(lambda: len(top_level(slack)) > before, what="the history message")
        assert "ratio 4" in text_of(top_level(slack)[-1])
    assert socket_mode.unmatched_messages() == []
    assert store.history("kimi-01", 1)[0].outcome is RevisionOutcome.READY
    notice = slack.replies(CHANNEL, posted.ts)[-1].text
    assert "is ready" in notice


def _id(text: str) -> int:
    return int(text.split("#", 1)[1].split(" ", 1)[0])
