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
    out: Collection[str] = (),
    may_be_out: int = 0,
) -> tuple[NotReady, ...]:
    """The workers other than ``leaving`` that are not ready to take its traffic, and the
    replicas out of the router once more of them are out than ``may_be_out`` (the fleet's
    ``max_unavailable`` less ``leaving`` itself): those of ``expected`` (the fleet's other
    replicas) the router does not hold, whatever took them out (sglang-router 0.1.x drops a
    worker whose requests failed and never adds it back; a rollout that stopped leaves a failed
    replica out), and ``out``, those the rollout itself is taking out. A worker with no breaker
    line has never failed a request, so its breaker is closed."""
    listed = {worker.url.rstrip("/") for worker in workers}
    gone = leaving.rstrip("/")
    ours = {url.rstrip("/") for url in out} - {gone}
    missing = [
        url.rstrip("/")
        for url in dict.fromkeys(expected)
        if url.rstrip("/") not in listed and url.rstrip("/") != gone
    ]
    waiting = []
    if len(ours | set(missing)) > may_be_out:
        waiting = [NotReady(url, "not in the router") for url in missing if url not in ours]
        waiting += [NotReady(url, "out of the router for this rollout") for url in sorted(ours)]
    for worker in workers:
        url = worker.url.rstrip("/")
        if url == gone or url in ours:
            continue
        breaker = Breaker.CLOSED if breakers is None else breakers.get(url, Breaker.CLOSED)
        reasons = [] if worker.healthy else ["unhealthy"]
        if breaker is not Breaker.CLOSED:
            reasons.append(f"breaker {breaker.value}")
        if reasons:
            waiting.append(NotReady(url, ", ".join(reasons)))
    return tuple(waiting)
