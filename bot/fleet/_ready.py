"""Which of the router's other workers could not carry a replica's traffic yet.

Pure: the router's worker list and breakers in, the workers still to wait for out. A worker the
router holds counts as ready once the router reports it healthy and, where the router has
breakers, its breaker is closed. Half-open is not enough: the router lets only a few requests
through until enough succeed, and an open one gets none.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from bot.fleet.breakers import Breaker
from bot.fleet.router import RouterWorker

__all__ = ["NotReady", "not_ready"]


@dataclass(frozen=True)
class NotReady:
    """A worker the rollout waits for, and why (``unhealthy``, ``breaker open``, ...)."""

    url: str
    why: str


def not_ready(
    workers: tuple[RouterWorker, ...],
    breakers: Mapping[str, Breaker] | None,
    leaving: str,
    expected: Collection[str] = (),
) -> tuple[NotReady, ...]:
    """The workers other than ``leaving`` that are not ready to take its traffic, and those of
    ``expected`` (the fleet's other replicas the rollout has not taken out) the router does not
    hold: sglang-router 0.1.x drops a worker whose requests failed and never adds it back. A
    worker with no breaker line has never failed a request, so its breaker is closed."""
    listed = {worker.url.rstrip("/") for worker in workers}
    waiting = [
        NotReady(url.rstrip("/"), "not in the router")
        for url in expected
        if url.rstrip("/") not in listed and url.rstrip("/") != leaving.rstrip("/")
    ]
    for worker in workers:
        url = worker.url.rstrip("/")
        if url == leaving.rstrip("/"):
            continue
        breaker = Breaker.CLOSED if breakers is None else breakers.get(url, Breaker.CLOSED)
        reasons = [] if worker.healthy else ["unhealthy"]
        if breaker is not Breaker.CLOSED:
            reasons.append(f"breaker {breaker.value}")
        if reasons:
            waiting.append(NotReady(url, ", ".join(reasons)))
    return tuple(waiting)
