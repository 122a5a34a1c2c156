"""Fixtures for the Slack stand-ins' tests: the stand-ins running, and real slack_sdk clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slack_sdk import WebClient

from bot.testing import SlackApiStandIn, SocketModeStandIn


@pytest.fixture
def slack() -> Iterator[SlackApiStandIn]:
    """The Web API stand-in, serving on a free port for one test."""
    with SlackApiStandIn() as stand_in:
        yield stand_in


@pytest.fixture
def socket_mode(slack: SlackApiStandIn) -> Iterator[SocketModeStandIn]:
    """The Socket Mode stand-in, attached to ``slack``'s ``apps.connections.open``."""
    with SocketModeStandIn(slack) as stand_in:
        yield stand_in


@pytest.fixture
def client(slack: SlackApiStandIn) -> WebClient:
    """The real SDK client, pointed at the stand-in, with no retry handlers beyond the default."""
    return WebClient(token=slack.bot_token, base_url=slack.url, timeout=10)
