"""A bot stopped mid-rollout: the next bot on the same store resumes it from there.

Real parts throughout: sglang-router 0.3.2, three simulated replicas each with its agent over
HTTP, a SQLite store migrated by Alembic, and a load generator through the router. The first bot
is stopped at the worst moment: its agent has accepted kimi-02's operation, and the bot dies
before saving the operation's id (:class:`DyingBot`, a seam over the agent client and the store,
since a real bot killed there cannot be timed from outside)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from bot.agent_json import AgentOperation
from bot.chat.agent_client import AgentClient
from bot.clock import SystemClock
from bot.fleet import (
    FleetChange,
    FleetDesk,
    FleetRefusal,
    RolloutView,
    RouterApi,
    RouterClient,
)
from bot.store import Store, upgrade_to_head
from bot.vocab import (
    OperationKind,
    ReplicaPhase,
    RolloutState,
)
from tests.fleet._rig import LoadGenerator, fleet_of, wait_for_traffic
from tests.fleet._routers import VERSIONS

RATIO_4 = FleetChange(OperationKind.RESIZE, ratio=4)


class DyingBot:
    """The first bot's store and kimi-02's agent, as seen by a bot that dies right after the
    agent accepted kimi-02's operation: from then on nothing it does reaches the store."""

    def __init__(self, store: Store, agent: AgentClient) -> None:
        self.store = store
        self.agent = agent
        self.dead = threading.Event()

    # -- the store (every write after death is lost with the process) -------------------------

    def save_rollout(self, *args: Any, **kwargs: Any) -> Any:
        if self.dead.is_set():
            return None
        return self.store.save_rollout(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    # -- kimi-02's agent ----------------------------------------------------------------------

    def submit(self, *args: Any, **kwargs: Any) -> AgentOperation:
        operation = self.agent.submit(*args, **kwargs)
        self.dead.set()  # the agent accepted; the bot dies before it writes the id
        return operation


class DyingAgent:
    """kimi-02's agent client with its submit going through :class:`DyingBot`."""

    def __init__(self, bot: DyingBot) -> None:
        self.bot = bot

    def submit(self, *args: Any, **kwargs: Any) -> AgentOperation:
        return self.bot.submit(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.bot.agent, name)


class Sink:
    """A front end that keeps every view and every replica's end."""

    def __init__(self) -> None:
        self.views: list[RolloutView] = []
        self.ended: list[str] = []
        self.changed = threading.Condition()

    def rollout(self, view: RolloutView) -> None:
        with self.changed:
            self.views.append(view)
            self.changed.notify_all()

    def replica_ended(self, view: RolloutView, host: str) -> None:
        with self.changed:
            self.ended.append(host)


@pytest.mark.slow
def test_a_bot_stopped_mid_rollout_is_resumed_by_the_next_one(tmp_path: Path) -> None:
    """The first bot dies once kimi-02's agent accepted its resize, before the operation's id
    was saved; a fresh desk on the same store finds that operation at the agent and follows it
    (never starting a second), puts kimi-02 back in the router and finishes kimi-03: all three
    on ratio 4, each started once, not one request failed."""
    url = f"sqlite:///{tmp_path / 'kimi-ops.db'}"
    upgrade_to_head(url)
    with fleet_of(tmp_path, VERSIONS[RouterApi.BY_ID]) as fleet:
        config = fleet.settings()
        agents = fleet.agents()
        try:
            with LoadGenerator(fleet.router.url) as load:
                wait_for_traffic(load)
                first_sink = Sink()
                with Store(url) as store:
                    dying = DyingBot(store, agents["kimi-02"])
                    first_agents = {**agents, "kimi-02": DyingAgent(dying)}
                    first = FleetDesk(
                        {"prod": config}, dying, first_agents, first_sink, SystemClock(),
                        event_wait_s=0.5,
                    )  # fmt: skip
                    planned = first.plan("prod", RATIO_4)
                    assert not isinstance(planned, FleetRefusal), planned
                    record = first.begin("prod", RATIO_4, planned.replicas, "U0ANA", "C0OPS")
                    assert dying.dead.wait(240), "kimi-02's agent was never asked to resize"
                    first.close()
                    left = store.rollout(record.id)
                assert left.state is RolloutState.RUNNING
                assert [r.phase for r in left.replicas][::2] == [
                    ReplicaPhase.DONE,
                    ReplicaPhase.WAITING,
                ]
                # The intent is on record, the agent's answer is not.
                assert left.replicas[1].phase is ReplicaPhase.RESIZING
                assert left.replicas[1].operation_id is None
                with RouterClient(fleet.router.url) as router:
                    assert router.worker(fleet.url("kimi-02")) is None

                second_sink = Sink()
                with Store(url) as store:
                    second = FleetDesk(
                        {"prod": config}, store, agents, second_sink, SystemClock(),
                        event_wait_s=0.5,
                    )  # fmt: skip
                    resumed = second.resume()
                    assert [r.id for r in resumed] == [record.id]
                    done = second.wait(record.id, timeout_s=300)
                    second.close()
                    stored = store.rollout(record.id)
        finally:
            for agent in agents.values():
                agent.close()
        assert done is not None, "the resumed rollout did not end within 300 s"
        assert done.state is RolloutState.DONE, done
        assert stored.state is RolloutState.DONE
        assert stored.ended_at is not None
        assert [r.phase for r in stored.replicas] == [ReplicaPhase.DONE] * 3
        assert second_sink.ended == ["kimi-02", "kimi-03"]
        assert load.failed == []
        with RouterClient(fleet.router.url) as router:
            assert all(router.worker(fleet.url(h)) is not None for h in config.hosts)
        for replica, line in zip(fleet.replicas, stored.replicas, strict=True):
            with replica.client() as client:
                hicache = client.status().hicache
                rollout_ops = [op for op in client.operations(20) if op.actor == "U0ANA"]
            assert hicache is not None
            assert hicache.ratio == 4
            # Started once: the one operation the rollout ran is the one its line names.
            assert [op.id for op in rollout_ops] == [line.operation_id]
            assert line.revision is not None
