"""HTTP mode's front door, without a simulator: Slack's signature is required, a command is acked
at once and a bad one answered to its sender alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.store import Store
from bot.testing import REPLAY_WINDOW_S, SlackApiStandIn, SlackRequestSigner
from tests.chat.conftest import free_port
from tests.slack._harness import (
    CHANNEL,
    EVE,
    SIGNING_SECRET,
    RunningBot,
    http_bot,
    settings_for,
    wait_ephemeral,
)


@pytest.fixture
def bot(slack: SlackApiStandIn, store: Store) -> Iterator[RunningBot]:
    """The bot in HTTP mode, its one agent a port nobody listens on."""
    with http_bot(slack, settings_for(f"http://127.0.0.1:{free_port()}"), store) as running:
        yield running


def _chat_calls(slack: SlackApiStandIn) -> list[str]:
    return [c.method for c in slack.calls() if c.method not in ("auth.test",)]


@pytest.mark.parametrize("forgery", ["unsigned", "wrong secret", "replayed"])
def test_a_request_not_signed_by_slack_gets_401_and_changes_nothing(
    bot: RunningBot, slack: SlackApiStandIn, store: Store, forgery: str
) -> None:
    """Unsigned, signed with another secret, or signed over 5 minutes ago: 401 and nothing
    recorded or posted; the same request signed now is refused by policy and recorded."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    url = slack.new_response_url()
    age = REPLAY_WINDOW_S + 5 if forgery == "replayed" else 0
    request = signer.slash_command("restart", response_url=url, user_id=EVE, age_s=age)
    if forgery == "unsigned":
        request = request.unsigned()
    elif forgery == "wrong secret":
        request = request.signed_with("0" * 32)
    answer = bot.post(request)
    assert answer.status_code == 401
    assert _chat_calls(slack) == []
    assert store.refusals() == []
    genuine = signer.slash_command("restart", response_url=url, user_id=EVE)
    assert bot.post(genuine).status_code == 200
    assert "may not restart servers" in wait_ephemeral(slack, url)
    assert [r.user_id for r in store.refusals()] == [EVE]


def test_a_command_is_acked_empty_and_a_usage_error_goes_to_the_sender_only(
    bot: RunningBot, slack: SlackApiStandIn
) -> None:
    """/kimi resize ratio abc: 200 with an empty body at once, then the reason and the usage
    line through response_url, ephemeral; nothing is posted in the channel."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    url = slack.new_response_url()
    answer = bot.post(signer.slash_command("resize ratio abc", response_url=url, user_id=EVE))
    assert answer.status_code == 200
    assert answer.content == b""
    text = wait_ephemeral(slack, url)
    assert "'abc'" in text
    assert "usage: /kimi resize ratio <R>" in text
    (post,) = slack.response_posts(url)
    assert post.body["response_type"] == "ephemeral"
    assert slack.history(CHANNEL) == []


def test_help_is_ephemeral_and_lists_every_verb(bot: RunningBot, slack: SlackApiStandIn) -> None:
    """/kimi help answers the sender with the grammar in a code block."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    url = slack.new_response_url()
    bot.post(signer.slash_command("help", response_url=url, user_id=EVE))
    wait_ephemeral(slack, url)
    body = str(slack.response_posts(url)[0].body["blocks"])
    for verb in ("status", "resize ratio 4", "apply 12", "history 5", "hosts"):
        assert verb in body
