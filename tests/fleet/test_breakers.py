"""The router's circuit breakers: read from its Prometheus text, and the wait before a replica
goes out, which stops the rollout with the reason when the others never become ready.

The Prometheus lines are the real routers' (sglang-router 0.3.2 and 0.2.4, copied from their
``/metrics``); the gauge's encoding, 0 closed, 1 open, 2 half-open, is the one the routers'
own documentation gives and that a worker killed behind each wheel showed."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from bot.errors import RouterError
from bot.fleet import (
    Breaker,
    FleetChange,
    FleetSettings,
    ReplicaView,
    RolloutRunner,
    RolloutView,
    RouterApi,
    RouterClient,
    RouterWorker,
    breaker_states,
)
from bot.fleet.router import default_metrics_url
from bot.vocab import OperationKind, ReplicaPhase, RolloutState
from tests.fleet._standins import StandInAgent

SMG_032 = """\
# TYPE smg_worker_cb_consecutive_failures gauge
smg_worker_cb_consecutive_failures{worker="http://127.0.0.1:35765"} 10
# TYPE smg_worker_cb_state gauge
smg_worker_cb_state{worker="http://127.0.0.1:35765"} 1
smg_worker_cb_state{worker="http://127.0.0.1:58809"} 0
smg_worker_cb_state{worker="http://127.0.0.1:41000"} 2
smg_worker_health{worker="http://127.0.0.1:35765"} 1
"""
SGL_024 = """\
sgl_router_cb_state_transitions_total{worker="http://127.0.0.1:55157",from="closed",to="open"} 1
sgl_router_cb_state{worker="http://127.0.0.1:41027"} 0
sgl_router_cb_state{worker="http://127.0.0.1:55157"} 1
sgl_router_worker_health{worker="http://127.0.0.1:55157"} 1
"""
A, B, C = "http://127.0.0.1:35765", "http://127.0.0.1:58809", "http://127.0.0.1:41000"


def test_each_generation_s_gauge_reads_as_its_breaker_states() -> None:
    """0.3.x's smg_worker_cb_state and 0.2.x's sgl_router_cb_state give each worker's breaker,
    0 closed, 1 open, 2 half-open; other families on the same worker are not read as one."""
    assert breaker_states(SMG_032) == {A: Breaker.OPEN, B: Breaker.CLOSED, C: Breaker.HALF_OPEN}
    assert breaker_states(SGL_024) == {
        "http://127.0.0.1:41027": Breaker.CLOSED,
        "http://127.0.0.1:55157": Breaker.OPEN,
    }


def test_an_unknown_gauge_value_reads_as_open_never_as_closed() -> None:
    """A value outside 0, 1, 2 (or not a number) cannot let a replica go out on a guess."""
    text = (
        'smg_worker_cb_state{worker="http://w:1"} 7\nsmg_worker_cb_state{worker="http://w:2"} NaN\n'
    )
    assert breaker_states(text) == {"http://w:1": Breaker.OPEN, "http://w:2": Breaker.OPEN}


def _client(text: str, seen: list[str], metrics_url: str | None = None) -> RouterClient:
    """A 0.3.x router's answers (as test_router.py checks them against the wheel), its export
    on port 29000 only."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.path == "/workers":
            return httpx.Response(200, json={"workers": []})
        if request.url.path.startswith("/workers/"):
            return httpx.Response(400, text="Invalid worker_id: expected UUID")
        if request.url.port == 29000 and request.url.path == "/metrics":
            return httpx.Response(200, text=text)
        return httpx.Response(404)

    return RouterClient(
        "http://router.test:30000", transport=httpx.MockTransport(handler), metrics_url=metrics_url
    )


def test_the_breakers_are_read_from_the_router_s_default_metrics_port() -> None:
    """With no router_metrics set, the export is asked at the router's host on port 29000."""
    seen: list[str] = []
    with _client(SMG_032, seen) as client:
        assert client.breakers() == {A: Breaker.OPEN, B: Breaker.CLOSED, C: Breaker.HALF_OPEN}
    assert "http://router.test:29000/metrics" in seen
    assert default_metrics_url("http://[::1]:30000") == "http://[::1]:29000/metrics"


def test_an_export_that_cannot_be_read_is_a_router_error_naming_the_setting() -> None:
    """A metrics port that answers 404 is reported with its URL, not read as 'all closed'."""
    client = _client(SMG_032, [], metrics_url="http://router.test:9/metrics")
    client.api()
    with (
        client,
        pytest.raises(RouterError, match=r"router\.test:9/metrics answered 404"),
    ):
        client.breakers()


class FakeClock:
    """Time that moves only when the runner sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> datetime:
        return datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class ScriptedRouter:
    """A router whose workers and breakers follow a script by the clock's time; it records
    each removal. Stands in for the real router only for the timing logic (the real one is in
    test_rollout.py)."""

    def __init__(
        self,
        clock: FakeClock,
        api: RouterApi,
        breakers_at: list[tuple[float, Mapping[str, Breaker] | None]],
    ) -> None:
        self.clock = clock
        self._api = api
        self.breakers_at = breakers_at
        self.listed = {A: True, B: True, C: True}
        self.removed: list[tuple[str, float]] = []

    def api(self) -> RouterApi:
        return self._api

    def workers(self) -> tuple[RouterWorker, ...]:
        return tuple(RouterWorker(url, healthy, url) for url, healthy in self.listed.items())

    def worker(self, url: str) -> RouterWorker | None:
        return next((w for w in self.workers() if w.url == url), None)

    def breakers(self) -> Mapping[str, Breaker] | None:
        return [found for at, found in self.breakers_at if at <= self.clock.t][-1]

    def add(self, url: str) -> None:
        self.listed[url] = True

    def remove(self, url: str) -> None:
        """Recorded with the time, then refused: the tests stop the rollout at its first removal,
        since when it came is what they check."""
        self.removed.append((url, self.clock.t))
        raise RouterError("refused by the script")


class Saved:
    def __init__(self) -> None:
        self.seen: list[RolloutView] = []

    def save_rollout(self, view: RolloutView) -> None:
        self.seen.append(view)


class NoLoad:
    def busy(self, url: str) -> int | None:
        raise AssertionError("the replica was drained although it never left the router")


FLEET = FleetSettings("prod", "http://router.test:30000", ("kimi-01", "kimi-02", "kimi-03"),
                      poll_interval_s=1.0, breaker_timeout_s=30.0)  # fmt: skip
VIEW = RolloutView(
    1, "prod", "restart", "U1", RolloutState.RUNNING,
    (ReplicaView("kimi-01", A), ReplicaView("kimi-02", B), ReplicaView("kimi-03", C)),
)  # fmt: skip


def _runner(router: ScriptedRouter, clock: FakeClock, log: Saved) -> RolloutRunner:
    change = FleetChange(OperationKind.RESTART)
    # Each agent answers (asked before any replica goes out), its server serving.
    agents = {line.host: StandInAgent(line.host, line.url) for line in VIEW.replicas}
    return RolloutRunner(FLEET, change, router, agents, NoLoad(), clock, log)


def test_breakers_that_never_close_stop_the_rollout_before_a_replica_goes_out() -> None:
    """kimi-02's breaker open for longer than breaker_timeout_s: kimi-01 is never taken out,
    the rollout stops naming kimi-02 and its breaker, and the line showed the wait."""
    clock, log = FakeClock(), Saved()
    router = ScriptedRouter(clock, RouterApi.BY_ID, [(0.0, {A: Breaker.OPEN, B: Breaker.OPEN})])
    done = _runner(router, clock, log).run(VIEW)
    assert router.removed == []
    assert done.state is RolloutState.STOPPED
    assert done.reason is not None
    assert done.reason.startswith("kimi-01 was not taken out of the router: after 30 s")
    assert "kimi-02 (breaker open)" in done.reason
    assert [r.phase for r in done.replicas] == [ReplicaPhase.UNCHANGED] * 3
    shown = [v.replica("kimi-01").detail for v in log.seen]
    assert "waiting for kimi-02 (breaker open) in the router" in shown
    assert clock.t >= 30.0


def test_a_replica_goes_out_once_the_other_breakers_closed() -> None:
    """Open, then half-open (not enough), then closed at 12 s: kimi-01 is removed only then."""
    clock, log = FakeClock(), Saved()
    script: list[tuple[float, Mapping[str, Breaker] | None]] = [
        (0.0, {B: Breaker.OPEN, C: Breaker.OPEN}),
        (5.0, {B: Breaker.HALF_OPEN, C: Breaker.CLOSED}),
        (12.0, {B: Breaker.CLOSED, C: Breaker.CLOSED}),
    ]
    router = ScriptedRouter(clock, RouterApi.BY_ID, script)
    done = _runner(router, clock, log).run(VIEW)
    assert router.removed == [(A, pytest.approx(12.0, abs=1.0))]
    assert done.state is RolloutState.STOPPED
    shown = [v.replica("kimi-01").detail for v in log.seen]
    assert "waiting for kimi-02 (breaker half-open) in the router" in shown


def test_a_router_without_breakers_is_said_so_and_its_health_view_is_waited_on() -> None:
    """On 0.1.x (no breakers) an unhealthy kimi-03 is waited for, and the line says the router
    shows no breakers."""
    clock, log = FakeClock(), Saved()
    router = ScriptedRouter(clock, RouterApi.QUERY, [(0.0, None)])
    router.listed[C] = False
    done = _runner(router, clock, log).run(VIEW)
    assert done.state is RolloutState.STOPPED
    assert "kimi-03 (unhealthy)" in (done.reason or "")
    shown = [v.replica("kimi-01").detail or "" for v in log.seen]
    assert any("router 0.1.x shows no circuit breakers: checked its health view only" in d
               for d in shown), shown  # fmt: skip


def test_a_replica_the_router_dropped_is_named_and_not_waited_for() -> None:
    """0.1.x drops a worker whose requests failed and never adds it back: kimi-02 missing from
    the router keeps kimi-01 in, and since its agent runs nothing that could put it back, the
    rollout stops at once saying kimi-02 is not in the router."""
    clock, log = FakeClock(), Saved()
    router = ScriptedRouter(clock, RouterApi.QUERY, [(0.0, None)])
    del router.listed[B]
    done = _runner(router, clock, log).run(VIEW)
    assert router.removed == []
    assert done.state is RolloutState.STOPPED
    assert "kimi-02 (not in the router)" in (done.reason or "")
    assert clock.t < FLEET.breaker_timeout_s
