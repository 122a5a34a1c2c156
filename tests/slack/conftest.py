"""Fixtures for the Slack app's tests: the stand-ins, a migrated store, and one real agent on
the simulator shared by all of them (each start of it costs seconds; every test leaves it
idle, its operation ended)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store import Store
from bot.testing import SlackApiStandIn, SocketModeStandIn
from tests.chat._core_fixtures import migrated_store
from tests.chat.conftest import RunningAgent, SimHost, agent_on_sim


@pytest.fixture
def slack() -> Iterator[SlackApiStandIn]:
    """Slack's Web API stand-in on a free port."""
    with SlackApiStandIn() as stand_in:
        yield stand_in


@pytest.fixture
def socket_mode(slack: SlackApiStandIn) -> Iterator[SocketModeStandIn]:
    """Slack's Socket Mode stand-in, reached through ``slack``'s apps.connections.open."""
    with SocketModeStandIn(slack, default_timeout=15) as stand_in:
        yield stand_in


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A SQLite store migrated by Alembic to the newest revision."""
    with migrated_store(tmp_path) as the_store:
        yield the_store


@pytest.fixture(scope="session")
def kimi_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    """The field notes' host (449 GB, TP 8, SGLang 0.5.9) serving ratio 2, and its agent."""
    with agent_on_sim(tmp_path_factory.mktemp("kimi-01"), SimHost()) as agent:
        yield agent
