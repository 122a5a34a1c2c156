"""Twenty hosts in one report: twenty real agents (process backend, simulated hosts, servers
not started), all asked at once through the desk."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from bot.chat.agent_client import AgentClient
from bot.reports import ReportSettings
from bot.reports.runtime import ReportDesk, ServerMetricsSource
from bot.store import Store
from tests.chat.conftest import SMALL, RunningAgent, SimHost, write_agent_config
from tests.reports._fixtures import T0, SetClock

HOSTS = 20


@pytest.fixture
def twenty_agents(tmp_path: Path) -> Iterator[list[RunningAgent]]:
    agents = [
        RunningAgent(
            root=tmp_path / f"kimi-{n:02d}",
            config=write_agent_config(
                tmp_path / f"kimi-{n:02d}", SimHost(profile=SMALL, host_name=f"kimi-{n:02d}")
            ),
        )
        for n in range(1, HOSTS + 1)
    ]
    try:
        # A few at a time: twenty Python processes importing FastAPI at once on a small CI
        # machine would outlast each agent's start deadline.
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda agent: agent.start(), agents))
        yield agents
    finally:
        for agent in agents:
            agent.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_twenty_hosts_are_all_reported_each_with_its_own_figures(
    twenty_agents: list[RunningAgent], store: Store
) -> None:
    """Every host answers, in the order asked, under its own name, and each leaves a sample."""
    names = tuple(f"kimi-{n:02d}" for n in range(1, HOSTS + 1))
    clients = {
        name: AgentClient(agent.url, agent.token, host=name)
        for name, agent in zip(names, twenty_agents, strict=True)
    }
    desk = ReportDesk(clients, store, ReportSettings(), ServerMetricsSource({}), SetClock())
    try:
        reports = desk.gather(names)
    finally:
        for client in clients.values():
            client.close()
    assert [r.host for r in reports] == list(names)
    assert all(r.answered for r in reports), [r.problem for r in reports if not r.answered]
    assert {r.ranks for r in reports} <= {2, None}  # the small profile: TP 2, when known
    for name in names:
        assert len(store.capacity_samples(name, T0 - timedelta(days=1))) == 1
