"""The fleet commands in the Slack app: ``[fleets.NAME]`` given to the bot reaches its core, so
``/kimi fleets`` answers in the channel; without it the bot says none is configured. Signed
requests to the real Bolt app on uvicorn, the Web API stand-in, a real agent on the simulator."""

from __future__ import annotations

import pytest

from bot.fleet import FleetSettings
from bot.store import Store
from bot.testing import SlackApiStandIn, SlackRequestSigner
from tests.chat.conftest import RunningAgent
from tests.slack._harness import (
    BEN,
    SIGNING_SECRET,
    http_bot,
    settings_for,
    text_of,
    top_level,
    wait_ephemeral,
    wait_until,
)

# Nothing listens there: listing a fleet asks its replicas' agents, never the router.
ROUTER = "http://127.0.0.1:9"


@pytest.mark.slow
def test_fleets_lists_the_configured_fleet_with_its_replica(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """/kimi fleets names the fleet, its router and its replica with the replica's state."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    fleets = {"prod": FleetSettings("prod", ROUTER, ("kimi-01",))}
    with http_bot(slack, settings_for(kimi_agent.url), store, fleets=fleets) as bot:
        bot.command("fleets", BEN, signer)
        wait_until(lambda: bool(top_level(slack)), what="the fleets message")
        answer = text_of(top_level(slack)[-1])
    assert "Fleet prod" in answer
    assert ROUTER in answer
    assert "kimi-01" in answer
    assert "no rollout running" in answer
    assert "agent unreachable" not in answer  # the replica's own agent answered


@pytest.mark.slow
def test_without_fleets_the_bot_says_none_is_configured(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """A bot given no [fleets.NAME] answers /kimi fleets by naming the section to add."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    with http_bot(slack, settings_for(kimi_agent.url), store) as bot:
        answer = wait_ephemeral(slack, bot.command("fleets", BEN, signer))
    assert "[fleets.NAME]" in answer
