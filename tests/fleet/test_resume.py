"""A bot stopped mid-rollout: the next bot on the same store resumes it from there.

Real parts throughout: sglang-router 0.3.2, three simulated replicas each with its agent over
HTTP, a SQLite store migrated by Alembic, and a load generator through the router."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

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


class Sink:
    """A front end that keeps every view and every replica's end, and wakes waiters."""

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

    def wait_for(self, host: str, phase: ReplicaPhase, timeout_s: float = 240) -> RolloutView:
        def seen() -> RolloutView | None:
            return next(
                (
                    v
                    for v in reversed(self.views)
                    if v.replica(host).phase is phase and v.replica(host).operation_id
                ),
                None,
            )

        with self.changed:
            if not self.changed.wait_for(lambda: seen() is not None, timeout_s):
                last = self.views[-1] if self.views else None
                pytest.fail(f"{host} never reached {phase} within {timeout_s} s; last: {last}")
            found = seen()
            assert found is not None
            return found


@pytest.mark.slow
def test_a_bot_stopped_mid_rollout_is_resumed_by_the_next_one(tmp_path: Path) -> None:
    """The first desk stops while kimi-02's agent restarts it; a fresh desk on the same store
    follows that operation (never starting a second), puts kimi-02 back in the router and
    finishes kimi-03: all three on ratio 4, each started once, not one request failed."""
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
                    first = FleetDesk(
                        {"prod": config}, store, agents, first_sink, SystemClock(),
                        event_wait_s=0.5,
                    )  # fmt: skip
                    planned = first.plan("prod", RATIO_4)
                    assert not isinstance(planned, FleetRefusal), planned
                    record = first.begin("prod", RATIO_4, planned.replicas, "U0ANA", "C0OPS")
                    first_sink.wait_for("kimi-02", ReplicaPhase.RESIZING)
                    first.close()
                    left = store.rollout(record.id)
                assert left.state is RolloutState.RUNNING
                assert [r.phase for r in left.replicas][::2] == [
                    ReplicaPhase.DONE,
                    ReplicaPhase.WAITING,
                ]
                assert left.replicas[1].phase is ReplicaPhase.RESIZING
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
