"""Twenty hosts in one report: twenty real agents (process backend, simulated hosts, servers
not started), all asked at once through the desk.

Each agent is the agent's own composition (``build_service`` and ``create_app`` on its own
state directory and config) on its own uvicorn server on a free port, all in this process, so
the desk reaches each over real HTTP. Twenty ``kimi-ops agent`` processes, each importing
FastAPI, took 23 s of a 2-core machine to start; what the report does with twenty answers does
not depend on which process serves them (``tests/chat`` starts the agent as its own process).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from bot.agent.config import load_agent_settings
from bot.agent.http.app import create_app
from bot.agent.service import AgentService, build_service
from bot.chat.agent_client import AgentClient
from bot.reports import ReportSettings
from bot.reports.runtime import ReportDesk, ServerMetricsSource
from bot.settings import Secret
from bot.store import Store
from tests.agent._api_helpers import serve_in_thread
from tests.chat.conftest import SMALL, TOKEN, TOKEN_ENV, SimHost, write_agent_config
from tests.reports._fixtures import T0, SetClock

HOSTS = 20


@dataclass(frozen=True)
class ServedAgent:
    """One agent served from this process: where it listens and its token."""

    url: str
    token: Secret


@pytest.fixture
def twenty_agents(tmp_path: Path) -> Iterator[list[ServedAgent]]:
    environ = {TOKEN_ENV: TOKEN}

    def compose(name: str) -> AgentService:
        config = write_agent_config(tmp_path / name, SimHost(profile=SMALL, host_name=name))
        return build_service(load_agent_settings(config, environ))

    with contextlib.ExitStack() as stack:
        # Composed side by side: an agent's state file is created with fsyncs, which wait on
        # the disk rather than the CPU.
        with ThreadPoolExecutor(max_workers=HOSTS) as pool:
            services = list(pool.map(compose, (f"kimi-{n:02d}" for n in range(1, HOSTS + 1))))
        for service in services:
            stack.callback(service.close)
        yield [
            ServedAgent(stack.enter_context(serve_in_thread(create_app(service))), Secret(TOKEN))
            for service in services
        ]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_twenty_hosts_are_all_reported_each_with_its_own_figures(
    twenty_agents: list[ServedAgent], store: Store
) -> None:
    """Every host answers, in the order asked, under its own name, and each leaves a sample."""
    names = tuple(f"kimi-{n:02d}" for n in range(1, HOSTS + 1))
    clients = {
        # Twenty agents share this process's interpreter: the read deadline that marks a hung
        # agent in a second (tests/chat) would mark slow ones here, which is not what is tested.
        name: AgentClient(agent.url, agent.token, host=name, read_deadline_s=60)
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
