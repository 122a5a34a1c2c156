"""Fixtures of the reports' tests: a SQLite store migrated by Alembic, and a real agent on the
simulated field-notes host (449 GB RAM, TP 8, serving ratio 2), shared by the tests that only
read it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store import Store
from tests.chat._core_fixtures import migrated_store
from tests.chat.conftest import RunningAgent, SimHost, agent_on_sim


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with migrated_store(tmp_path) as opened:
        yield opened


@pytest.fixture(scope="session")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    """Tests using it must leave its config as they found it (no apply)."""
    with agent_on_sim(tmp_path_factory.mktemp("kimi-01"), SimHost()) as agent:
        yield agent
