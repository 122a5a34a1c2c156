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
    RolloutRunner,
    RolloutView,
    RouterApi,
    RouterClient,
    plan_fleet,
)
from bot.vocab import (
    OperationKind,
    ReplicaPhase,
    RolloutState,
)
from tests.fleet._rig import Fleet, LoadGenerator, fleet_of, wait_for_traffic
from tests.fleet._routers import VERSIONS

RATIO_4 = FleetChange(OperationKind.RESIZE, ratio=4)


class Views:
    """The rollout's log and its front end at once: every view, in order."""

    def __init__(self) -> None:
        self.seen: list[RolloutView] = []

    def save_rollout(self, view: RolloutView) -> None:
        self.seen.append(view)


def _roll(
    fleet: Fleet, change: FleetChange, views: Views, hosts: int | None = None, **settings: float
) -> RolloutView:
    config = fleet.settings(hosts, **settings)
    agents = fleet.agents()
    try:
        planned = plan_fleet(config, agents, change)
        assert not isinstance(planned, FleetRefusal), planned
        view = RolloutView(1, "prod", change.label, "U1", RolloutState.RUNNING, planned.replicas)
        with RouterClient(config.router) as router:
            runner = RolloutRunner(
                config, change, router, agents, ReplicaLoad(), SystemClock(), views
            )
            return runner.run(view)
    finally:
        # Each client holds a pooled keep-alive connection to its agent: closed here, not left
        # to the garbage collector (which filterwarnings = error turns into a failure).
        for agent in agents.values():
            agent.close()


@pytest.mark.slow
def test_a_rollout_under_load_drops_no_request(tmp_path: Path) -> None:
    """Ratio 4 rolled over three replicas behind sglang-router 0.3.2 while clients send plain and
    streamed requests through it: every replica changed, not one request failed."""
    with fleet_of(tmp_path, VERSIONS[RouterApi.BY_ID]) as fleet:
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


@pytest.mark.slow
def test_a_replica_whose_new_config_fails_stops_the_rollout_back_on_its_old_config(
    tmp_path: Path,
) -> None:
    """kimi-02's SGLang sizes its host pool 1.3 times the rule (so ratio 4 runs out of RAM): it is
    rolled back to 20 GB/rank and back in the router healthy; kimi-01 changed, kimi-03 was not
    touched, and the rollout stopped saying so."""
    failing = {"kimi-02": "host_pool_x:1.3"}
    with fleet_of(tmp_path, VERSIONS[RouterApi.BY_ID], failing=failing) as fleet:
        views = Views()
        with LoadGenerator(fleet.router.url) as load:
            wait_for_traffic(load)
            done = _roll(fleet, RATIO_4, views)
        assert done.state is RolloutState.STOPPED
        assert [r.phase for r in done.replicas] == [
            ReplicaPhase.DONE,
            ReplicaPhase.ROLLED_BACK,
            ReplicaPhase.UNCHANGED,
        ]
        assert done.changed == ("kimi-01",)
        assert done.unchanged == ("kimi-02", "kimi-03")
        assert done.reason == "kimi-02's new config failed and was rolled back"
        assert load.failed == []
        with RouterClient(fleet.router.url) as router:
            back = router.worker(fleet.replicas[1].server_url)
        assert back is not None
        assert back.healthy
        sizes = {}
        for replica in fleet.replicas:
            with replica.client() as client:
                hicache = client.status().hicache
            assert hicache is not None
            sizes[replica.host] = (hicache.ratio, hicache.size_gb)
        assert sizes == {"kimi-01": (4, None), "kimi-02": (None, 20), "kimi-03": (None, 20)}


@pytest.mark.slow
def test_a_drain_timeout_reached_is_reported_and_sigterm_finishes_the_requests(
    tmp_path: Path,
) -> None:
    """With 3 s requests and a 0.5 s drain timeout, the replica's line says the timeout was
    reached with requests running, and SGLang's SIGTERM drain still finishes them: none fails."""
    with fleet_of(tmp_path, VERSIONS[RouterApi.BY_ID], count=2, generate_s=3.0) as fleet:
        views = Views()
        with LoadGenerator(fleet.router.url, workers=4) as load:
            wait_for_traffic(load, count=2)
            done = _roll(fleet, RATIO_4, views, hosts=1, drain_timeout_s=0.5)
        line = done.replica("kimi-01")
        assert line.phase is ReplicaPhase.DONE
        assert line.detail is not None
        assert line.detail.startswith("drain timeout 0.5 s reached with ")
        assert "requests running; SGLang's own SIGTERM drain finishes them" in line.detail
        assert load.failed == []
