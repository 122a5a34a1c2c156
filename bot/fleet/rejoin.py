"""Putting back a replica that serves but is out of the router.

A replica can be left out of the router while it serves: a rollout stopped after it failed and
it was fixed by hand, sglang-router 0.1.x dropped it after failed requests, someone removed it.
Nothing puts it back on its own, and while it is out it counts against the fleet's
``max_unavailable``. :func:`rejoin` checks it first, then adds it::

    its agent answers, no operation runs on it, its server runs and answers /health 200
    -> POST it to the router -> the router reports it healthy -> its breaker is closed

Each check that fails refuses with what it found; nothing is added then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.clock import Clock
from bot.errors import AgentError, RouterError
from bot.fleet.breakers import Breaker
from bot.fleet.config import FleetSettings
from bot.fleet.plan import ReplicaAgent
from bot.fleet.rollout import RouterSeam
from bot.vocab import ServerState

__all__ = ["Rejoined", "rejoin", "serving_out"]


@dataclass(frozen=True)
class Rejoined:
    """The outcome for one replica: ``refused`` says why it was not added (None: it is back,
    healthy with its breaker closed; ``already`` when the router held it before)."""

    host: str
    url: str | None
    refused: str | None = None
    already: bool = False


def _serving(agent: ReplicaAgent, fleet: FleetSettings, host: str) -> tuple[str | None, str | None]:
    """``host``'s URL in the router and None when it serves, else (URL or None, why not)."""
    try:
        status = agent.status()
    except AgentError as exc:
        return fleet.url(host), f"its agent does not answer ({exc})"
    url = fleet.url(host, status.router_url)
    if url is None:
        return None, "no URL for it in the router (set [agent] router_url)"
    if status.operation is not None and not status.operation.finished:
        return url, (
            f"its agent runs operation {status.operation.id} ({status.operation.kind.value}); "
            "wait for it to end"
        )
    if status.server_state is not ServerState.RUNNING or status.health_code != 200:
        return url, (
            f"its server is not healthy (server {status.server_state.value}, health "
            f"{status.health_code}); fix it first"
        )
    return url, None


def rejoin(
    fleet: FleetSettings, router: RouterSeam, agent: ReplicaAgent, host: str, clock: Clock
) -> Rejoined:
    """Put ``host`` back in ``fleet``'s router once its agent says it serves; wait until the
    router reports it healthy with its breaker closed (``healthy_timeout_s``)."""
    url, why = _serving(agent, fleet, host)
    if why is not None or url is None:
        return Rejoined(host, url, why or "no URL for it in the router")
    try:
        if router.worker(url) is not None:
            return Rejoined(host, url, already=True)
        router.add(url)
        deadline = clock.monotonic() + fleet.healthy_timeout_s
        while True:
            found = router.worker(url)
            breakers = router.breakers() if found is not None and found.healthy else None
            breaker = Breaker.CLOSED if breakers is None else breakers.get(url, Breaker.CLOSED)
            if found is not None and found.healthy and breaker is Breaker.CLOSED:
                return Rejoined(host, url)
            if clock.monotonic() >= deadline:
                seen = "not listed" if found is None else (
                    "unhealthy" if not found.healthy else f"breaker {breaker.value}"
                )  # fmt: skip
                return Rejoined(
                    host,
                    url,
                    f"added, but after {fleet.healthy_timeout_s:g} s the router still shows it "
                    f"{seen}",
                )
            clock.sleep(min(fleet.poll_interval_s, 0.5))
    except RouterError as exc:
        return Rejoined(host, url, f"the router could not take it: {exc}")


def serving_out(
    fleet: FleetSettings,
    listed: Callable[[str], bool],
    agents: dict[str, ReplicaAgent],
) -> tuple[str, ...]:
    """The hosts of ``fleet`` that serve but that the router does not hold (``listed`` says
    whether it holds a URL)."""
    found = []
    for host in fleet.hosts:
        url, why = _serving(agents[host], fleet, host)
        if why is None and url is not None and not listed(url):
            found.append(host)
    return tuple(found)
