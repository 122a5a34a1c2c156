"""Putting back a replica that serves but is out of the router: checked first (its agent, its
server's health, no operation running), added, then waited for until the router reports it
healthy with its breaker closed. In-process stand-ins for the agent and the router."""

from __future__ import annotations

from bot.fleet import Breaker, FleetSettings
from bot.fleet.rejoin import Rejoined, rejoin, serving_out
from bot.vocab import OperationState
from tests.fleet._standins import FakeClock, StandInAgent, StandInRouter, operation

A, B = "http://10.0.0.11:30000", "http://10.0.0.12:30000"
FLEET = FleetSettings("prod", "http://router.test:30000", ("kimi-01", "kimi-02"),
                      poll_interval_s=1.0, healthy_timeout_s=20.0)  # fmt: skip


def test_a_healthy_replica_out_of_the_router_is_added_and_waited_for() -> None:
    """kimi-02 serves, out of the router: it is added, and reported back once the router shows
    it healthy (after a few listings)."""
    clock, router = FakeClock(), StandInRouter({A: True})
    router.healthy_after = 3
    done = rejoin(FLEET, router, StandInAgent("kimi-02", B), "kimi-02", clock)
    assert done == Rejoined("kimi-02", B)
    assert router.added == [B]
    assert router.listed[B] is True


def test_a_replica_whose_server_is_down_is_not_added() -> None:
    """kimi-02's server failed: refused with its state and health, and the router is not
    asked to add it."""
    agent = StandInAgent("kimi-02", B, serving=False)
    done = rejoin(FLEET, StandInRouter({A: True}), agent, "kimi-02", FakeClock())
    assert done.refused == "its server is not healthy (server failed, health None); fix it first"
    assert done.url == B


def test_a_replica_whose_agent_is_silent_or_busy_is_not_added() -> None:
    """A silent agent, or one running an operation, refuses the rejoin with what it found."""
    router = StandInRouter({A: True})
    silent = StandInAgent("kimi-02", B)
    silent.silent = True
    assert rejoin(FLEET, router, silent, "kimi-02", FakeClock()).refused == (
        "its agent does not answer (agent kimi-02: no answer in 1 s)"
    )
    busy = StandInAgent("kimi-02", B)
    busy.last = operation(7, OperationState.RUNNING)
    assert rejoin(FLEET, router, busy, "kimi-02", FakeClock()).refused == (
        "its agent runs operation 7 (resize); wait for it to end"
    )
    assert router.added == []


def test_a_breaker_that_stays_open_is_reported_after_the_timeout() -> None:
    """Added and healthy, but its breaker open past healthy_timeout_s: refused saying so."""
    clock, router = FakeClock(), StandInRouter({A: True})
    router.breaker[B] = Breaker.OPEN
    done = rejoin(FLEET, router, StandInAgent("kimi-02", B), "kimi-02", clock)
    assert done.refused == "added, but after 20 s the router still shows it breaker open"
    assert clock.t >= 20.0


def test_serving_out_lists_only_healthy_replicas_the_router_lacks() -> None:
    """kimi-02 serves out of the router and is listed; kimi-01 (in the router) is not, nor a
    replica whose server is down."""
    router = StandInRouter({A: True})
    agents = {"kimi-01": StandInAgent("kimi-01", A), "kimi-02": StandInAgent("kimi-02", B)}
    assert serving_out(FLEET, lambda url: url in router.listed, dict(agents)) == ("kimi-02",)
    agents["kimi-02"].serving = False
    assert serving_out(FLEET, lambda url: url in router.listed, dict(agents)) == ()
