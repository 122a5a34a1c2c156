"""The rollout end to end: a real sglang-router in front of three simulated replicas, each with
its own agent over real HTTP, and a load generator sending requests through the router for the
whole rollout."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bot.clock import SystemClock
from bot.fleet import (
    Breaker,
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
    OperationState,
    ReplicaPhase,
    RolloutState,
)
from tests.fleet._rig import Fleet, LoadGenerator, Replica, fleet_of, wait_for_traffic
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
        with RouterClient(config.router, metrics_url=config.router_metrics) as router:
            runner = RolloutRunner(
                config, change, router, agents, ReplicaLoad(), SystemClock(), views
            )
            return runner.run(view)
    finally:
        # Each client holds a pooled keep-alive connection to its agent: closed here, not left
        # to the garbage collector (which filterwarnings = error turns into a failure).
        for agent in agents.values():
            agent.close()


#: The router's breaker timeout in these tests (60 s by default): long enough that the breakers
#: restarts by hand open are still open when the rollout starts, short enough for the suite.
BREAKER_TIMEOUT_S = 30
#: Each generation in make test (0.3.2) or make test-long (the older two), with its own flags.
GENERATIONS = [
    pytest.param(RouterApi.QUERY, (), id="0.1.9", marks=pytest.mark.long),
    pytest.param(
        RouterApi.BY_URL,
        ("--cb-timeout-duration-secs", str(BREAKER_TIMEOUT_S)),
        id="0.2.4",
        marks=pytest.mark.long,
    ),
    pytest.param(
        RouterApi.BY_ID,
        ("--cb-timeout-duration-secs", str(BREAKER_TIMEOUT_S)),
        id="0.3.2",
        marks=pytest.mark.slow,
    ),
]


def _restart_by_hand(fleet: Fleet, hosts: tuple[str, ...]) -> None:
    """Restart ``hosts`` through their agents at once, left in the router (as done by hand)."""

    def restart(replica: Replica) -> str:
        page = replica.agent.run_to_end({"kind": "restart", "actor": "by-hand"})
        return str(page["state"])

    chosen = [r for r in fleet.replicas if r.host in hosts]
    with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
        states = list(pool.map(restart, chosen))
    assert states == [OperationState.READY] * len(chosen), states


def _put_back_what_0_1_dropped(fleet: Fleet) -> None:
    """0.1.x drops a worker whose requests failed and never adds it back: a rollout then would
    leave kimi-01 alone, so it stops before taking it out, naming the two; added back by hand,
    they are in the router again."""
    with RouterClient(fleet.router.url) as router:
        listed = {w.url.rstrip("/") for w in router.workers()}
        assert listed == {fleet.url("kimi-01")}, listed
        stopped = _roll(fleet, RATIO_4, Views(), breaker_timeout_s=1.0)
        assert stopped.state is RolloutState.STOPPED, stopped
        assert stopped.reason is not None
        assert "kimi-02 (not in the router), kimi-03 (not in the router)" in stopped.reason
        for host in ("kimi-02", "kimi-03"):
            router.add(fleet.url(host))
        assert len(router.workers()) == 3


@pytest.mark.parametrize(("api", "flags"), GENERATIONS)
def test_a_rollout_under_load_right_after_restarts_by_hand_drops_no_request(
    api: RouterApi, flags: tuple[str, ...], tmp_path: Path
) -> None:
    """kimi-02 and kimi-03 restarted by hand while still in the router (on 0.2.4 and 0.3.2 their
    breakers open; 0.1.9 drops them), then ratio 4 rolled over the three under load: kimi-01
    waits until the others can take its traffic, every replica changes, and not one of the
    rollout's requests fails."""
    with fleet_of(tmp_path, VERSIONS[api], router_flags=flags) as fleet:
        views = Views()
        with LoadGenerator(fleet.router.url) as load:
            wait_for_traffic(load)
            _restart_by_hand(fleet, ("kimi-02", "kimi-03"))
            if api is RouterApi.QUERY:
                _put_back_what_0_1_dropped(fleet)
            by_hand_ok, by_hand_failed = load.ok, len(load.failed)
            with RouterClient(fleet.router.url, metrics_url=fleet.router.metrics_url) as router:
                breakers = router.breakers()
            started = time.monotonic()
            done = _roll(fleet, RATIO_4, views)
            took = time.monotonic() - started
        assert done.state is RolloutState.DONE, done
        assert [r.phase for r in done.replicas] == [ReplicaPhase.DONE] * 3
        assert load.failed[by_hand_failed:] == []
        assert load.ok - by_hand_ok > 50
        waits = [v.replica("kimi-01").detail or "" for v in views.seen]
        if api is RouterApi.QUERY:
            assert breakers is None
            assert any("router 0.1.x shows no circuit breakers" in d for d in waits), waits
        else:
            assert breakers is not None
            opened = {h for h in ("kimi-02", "kimi-03") if breakers.get(fleet.url(h)) is not None
                      and breakers[fleet.url(h)] is not Breaker.CLOSED}  # fmt: skip
            assert opened, f"the restarts by hand opened no breaker: {breakers}"
            # kimi-01 stayed in the router until the breakers the restarts opened closed.
            assert any(all(f"{h} (" in d for h in opened) and "breaker" in d for d in waits), waits
        for replica in fleet.replicas:
            with replica.client() as client:
                hicache = client.status().hicache
            assert hicache is not None
            assert hicache.ratio == 4
        # Each replica went out of the router, drained, changed and came back in that order.
        phases = [(v.replica("kimi-02").phase) for v in views.seen]
        assert list(dict.fromkeys(phases)) == [
            ReplicaPhase.WAITING,
            ReplicaPhase.REMOVING,
            ReplicaPhase.DRAINING,
            ReplicaPhase.RESIZING,
            ReplicaPhase.ADDING,
            ReplicaPhase.DONE,
        ]
        figures = {
            "router": VERSIONS[api],
            "by_hand_failed": by_hand_failed,
            "breakers_before": None if breakers is None else dict(breakers),
            "requests_ok": load.ok - by_hand_ok,
            "requests_failed": len(load.failed) - by_hand_failed,
            "rollout_s": round(took, 2),
            "replica_out_s": [round(r.seconds or 0, 2) for r in done.replicas],
        }
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
