"""The Bolt app's client helpers against the Slack Web API stand-in (real HTTP)."""

from __future__ import annotations

from slack_sdk import WebClient

from bot.slack.app import bot_user_id
from bot.testing import SlackApiStandIn
from bot.testing._methods import BOT_USER_ID
from tests._ports import free_port


def test_the_bot_user_id_is_what_auth_test_answers(slack: SlackApiStandIn) -> None:
    """auth.test's user_id: what a capacity report's proposal mentions instead of the
    '<@kimi-ops-reports>' no Slack user has."""
    assert bot_user_id(WebClient(token=slack.bot_token, base_url=slack.url)) == BOT_USER_ID


def test_no_bot_user_id_when_slack_does_not_answer() -> None:
    """A Slack that cannot be reached gives None (the bot then names itself in plain text)."""
    client = WebClient(token="xoxb-none", base_url=f"http://127.0.0.1:{free_port()}/api/")
    assert bot_user_id(client) is None
