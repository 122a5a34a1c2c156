"""The rollout end to end: a real sglang-router in front of three simulated replicas, each with
its own agent over real HTTP, and a load generator sending requests through the router for the
whole rollout."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bot.clock import SystemClock
from bot.fleet import (
    FleetChange,
    FleetRefusal,
    ReplicaLoad,
    ReplicaPhase,
    RolloutRunner,
    RolloutState,
    RolloutView,
    RouterApi,
    RouterClient,
    plan_fleet,
)
from bot.vocab import OperationKind
from tests.fleet._rig import Fleet, LoadGenerator, fleet_of_three, wait_for_traffic
from tests.fleet._routers import VERSIONS

RATIO_4 = FleetChange(OperationKind.RESIZE, ratio=4)


class Views:
    """The rollout's log and its front end at once: every view, in order."""

    def __init__(self) -> None:
        self.seen: list[RolloutView] = []

    def save_rollout(self, view: RolloutView) -> None:
        self.seen.append(view)


def _roll(fleet: Fleet, change: FleetChange, views: Views, **settings: float) -> RolloutView:
    config = fleet.settings(**settings)
    agents = fleet.agents()
    planned = plan_fleet(config, agents, change)
    assert not isinstance(planned, FleetRefusal), planned
    view = RolloutView(1, "prod", change.label, "U1", RolloutState.RUNNING, planned)
    with RouterClient(config.router) as router:
        runner = RolloutRunner(config, change, router, agents, ReplicaLoad(), SystemClock(), views)
        return runner.run(view)


@pytest.mark.slow
def test_a_rollout_under_load_drops_no_request(tmp_path: Path) -> None:
    """Ratio 4 rolled over three replicas behind sglang-router 0.3.2 while clients send plain and
    streamed requests through it: every replica changed, not one request failed."""
    with fleet_of_three(tmp_path, VERSIONS[RouterApi.BY_ID]) as fleet:
        views = Views()
        with LoadGenerator(fleet.router.url) as load:
            wait_for_traffic(load)
            started = time.monotonic()
            done = _roll(fleet, RATIO_4, views)
            took = time.monotonic() - started
        assert done.state is RolloutState.DONE, done
        assert [r.phase for r in done.replicas] == [ReplicaPhase.DONE] * 3
        assert load.failed == []
        assert load.ok > 50
        for replica in fleet.replicas:
            with replica.client() as client:
                hicache = client.status().hicache
            assert hicache is not None
            assert hicache.ratio == 4
        # Each replica went out of the router, drained, changed and came back in that order.
        phases = [(v.replica("kimi-02").phase) for v in views.seen]
        firsts = list(dict.fromkeys(phases))
        assert firsts == [
            ReplicaPhase.WAITING,
            ReplicaPhase.REMOVING,
            ReplicaPhase.DRAINING,
            ReplicaPhase.RESIZING,
            ReplicaPhase.ADDING,
            ReplicaPhase.DONE,
        ]
        figures = {
            "requests_ok": load.ok,
            "requests_failed": len(load.failed),
            "rollout_s": round(took, 2),
            "replica_out_s": [round(r.seconds or 0, 2) for r in done.replicas],
        }
        (tmp_path / "figures.json").write_text(json.dumps(figures))
        print(json.dumps(figures))
