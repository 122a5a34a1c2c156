"""The rollout with a fleet that is not whole: an agent down, a replica out of the router that
nothing will put back, one that an operation is bringing back. In-process stand-ins for the
agents and the router and a clock that moves when slept (the timing logic only; the real parts
run in test_rollout.py and test_commands.py)."""

from __future__ import annotations

from bot.fleet import FleetChange, FleetSettings, ReplicaView, RolloutRunner, RolloutView
from bot.vocab import OperationKind, OperationState, ReplicaPhase, RolloutState
from tests.fleet._standins import FakeClock, StandInAgent, StandInRouter, operation

A, B, C = "http://10.0.0.11:30000", "http://10.0.0.12:30000", "http://10.0.0.13:30000"
HOSTS = ("kimi-01", "kimi-02", "kimi-03")
URLS = dict(zip(HOSTS, (A, B, C), strict=True))


class Saved:
    def __init__(self) -> None:
        self.seen: list[RolloutView] = []

    def save_rollout(self, view: RolloutView) -> None:
        self.seen.append(view)


class NoLoad:
    def busy(self, url: str) -> int | None:
        return 0


def _fleet(max_unavailable: int = 1) -> FleetSettings:
    return FleetSettings("prod", "http://router.test:30000", HOSTS, poll_interval_s=1.0,
                         breaker_timeout_s=300.0, max_unavailable=max_unavailable,
                         drain_polls=1)  # fmt: skip


def _agents() -> dict[str, StandInAgent]:
    return {host: StandInAgent(host, url) for host, url in URLS.items()}


def _view(*hosts: str, change: str = "restart") -> RolloutView:
    lines = tuple(ReplicaView(h, URLS[h]) for h in hosts)
    return RolloutView(1, "prod", change, "U1", RolloutState.RUNNING, lines)


def _run(
    view: RolloutView,
    router: StandInRouter,
    agents: dict[str, StandInAgent],
    clock: FakeClock,
    max_unavailable: int = 1,
    members: dict[str, str] | None = None,
) -> RolloutView:
    change = FleetChange(OperationKind(view.change))
    runner = RolloutRunner(_fleet(max_unavailable), change, router, agents, NoLoad(), clock,
                           Saved(), members=members)  # fmt: skip
    return runner.run(view)


def test_an_agent_that_does_not_answer_stops_the_rollout_before_any_replica_goes_out() -> None:
    """kimi-03's agent silent: every agent is asked first, so kimi-01 never leaves the router
    and the rollout stops naming kimi-03 (it failed before: kimi-01 was restarted first)."""
    clock, agents = FakeClock(), _agents()
    agents["kimi-03"].silent = True
    router = StandInRouter({A: True, B: True, C: True})
    done = _run(_view(*HOSTS), router, agents, clock)
    assert router.removed == []
    assert agents["kimi-01"].submitted == []
    assert done.state is RolloutState.STOPPED
    assert done.reason is not None
    assert done.reason.startswith("kimi-03's agent does not answer (agent kimi-03: no answer")
    assert "none was taken out" in done.reason
    assert done.replica("kimi-03").detail == "not taken out: agent kimi-03: no answer in 1 s"


def test_a_replica_whose_agent_stops_answering_mid_rollout_is_not_drained() -> None:
    """A replica whose agent stops answering after the first check is asked again right before
    it goes out: it stays in the router, its line says why (it failed before: it was taken
    out and drained, then its agent was found silent)."""
    clock, agents = FakeClock(), _agents()
    router = StandInRouter({A: True, B: True, C: True})
    router.refuse_removal = False

    class GoesSilent(StandInAgent):
        def status(self):  # type: ignore[no-untyped-def]
            if self.asked >= 1:
                self.silent = True
            return super().status()

    agents["kimi-01"] = GoesSilent("kimi-01", A)
    done = _run(_view("kimi-01"), router, agents, clock)
    assert router.removed == []
    assert done.state is RolloutState.STOPPED
    assert done.reason == (
        "kimi-01 was not taken out of the router: its agent does not answer "
        "(agent kimi-01: no answer in 1 s)"
    )


def test_a_replica_out_of_the_router_with_a_failed_operation_stops_the_rollout_at_once() -> None:
    """After a rollout left kimi-02 out (both its configs failed), a rollback of kimi-01 alone
    counts kimi-02 against max_unavailable = 1 and stops at once, naming kimi-02 and why it
    will not come back, without waiting out breaker_timeout_s (it failed before: kimi-01 was
    taken out too, leaving one replica serving)."""
    clock, agents = FakeClock(), _agents()
    agents["kimi-02"].serving = False
    agents["kimi-02"].last = operation(12, OperationState.FAILED)
    router = StandInRouter({A: True, C: True})
    done = _run(_view("kimi-01", change="rollback"), router, agents, clock, members=URLS)
    assert router.removed == []
    assert done.state is RolloutState.STOPPED
    assert done.reason is not None
    assert done.reason.startswith(
        "kimi-01 was not taken out of the router: the router does not have kimi-02 (not in the "
        "router), and nothing will put it back: kimi-02 (its agent's operation 12 failed"
    )
    assert "max_unavailable = 1" in done.reason
    assert clock.t < 5.0


def test_a_replica_that_serves_out_of_the_router_is_named_with_how_to_put_it_back() -> None:
    """kimi-02 healthy but out of the router, nothing running on it: the rollout stops at once
    and says it serves but nothing put it back."""
    clock, agents = FakeClock(), _agents()
    router = StandInRouter({A: True, C: True})
    done = _run(_view("kimi-01"), router, agents, clock, members=URLS)
    assert router.removed == []
    assert (
        "kimi-02 (it serves, but nothing put it back in the router: 'fleet prod rejoin kimi-02' "
        "does)" in (done.reason or "")
    )
    assert clock.t < 5.0


def test_a_replica_an_operation_is_bringing_back_is_waited_for() -> None:
    """kimi-02 out while its agent runs an operation: kimi-01 waits (it may come back); once
    the router lists kimi-02 again, kimi-01 goes out."""
    clock, agents = FakeClock(), _agents()
    router = StandInRouter({A: True, C: True})

    class Returns(StandInAgent):
        """kimi-02's agent, whose operation puts it back in the router at 10 s."""

        def status(self):  # type: ignore[no-untyped-def]
            if clock.t >= 10.0:
                router.listed[B] = True
            return super().status()

    agents["kimi-02"] = Returns("kimi-02", B)
    agents["kimi-02"].last = operation(13, OperationState.RUNNING)
    done = _run(_view("kimi-01"), router, agents, clock, members=URLS)
    assert router.removed == [A]  # refused by the stand-in: the rollout stops there
    assert clock.t >= 10.0
    assert done.replica("kimi-01").phase is ReplicaPhase.UNCHANGED


def test_max_unavailable_two_lets_one_go_while_another_is_out() -> None:
    """With max_unavailable = 2 and kimi-02 out for whatever reason, kimi-01 may go out too:
    two out is the limit, not past it."""
    clock, agents = FakeClock(), _agents()
    router = StandInRouter({A: True, C: True})
    _run(_view("kimi-01"), router, agents, clock, max_unavailable=2, members=URLS)
    assert router.removed == [A]
