"""Is a replica idle? Asked of the replica itself, since the router does not drain.

SGLang 0.5.23's ``GET /v1/loads`` (``entrypoints/v1_loads.py``) answers
``{"loads": [{"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 0, ...}, ...]}``, and
earlier releases' ``GET /get_load`` (which 0.5.23 no longer serves) one object per DP rank::

    [{"dp_rank": 0, "num_reqs": 2, "num_waiting_reqs": 0, "num_tokens": 14}, ...]

and the replica is idle when nothing runs or waits on any rank. A server with neither is read
from ``/metrics`` instead: the sum of
``sglang:num_running_reqs`` and ``sglang:num_queue_reqs`` (with ``--enable-metrics``). A replica
that answers neither counts as unknown, never as idle. :func:`wait_idle` needs ``polls``
idle answers in a row (a request can arrive between two polls from a client that read the
router's list before the removal), up to the timeout.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from bot.clock import Clock

__all__ = ["DrainResult", "LoadProbe", "ReplicaLoad", "wait_idle"]

# sglang:num_running_reqs{model_name="m"} 2.0   (and num_queue_reqs: the waiting queue)
_BUSY = re.compile(r"^sglang:num_(?:running|queue)_reqs(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


class LoadProbe(Protocol):
    def busy(self, url: str) -> int | None:
        """Requests running or waiting on the replica at ``url``; None when it cannot tell."""
        ...


class ReplicaLoad:
    """:class:`LoadProbe` over HTTP: ``/v1/loads``, else ``/get_load``, else ``/metrics``."""

    def __init__(self, timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None):
        # No keep-alive: the replica polled is about to be stopped and started again.
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_keepalive_connections=0),
            headers={"Connection": "close"},
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def busy(self, url: str) -> int | None:
        try:
            for path, read in (("/v1/loads", _from_v1_loads), ("/get_load", _from_get_load)):
                reply = self._http.get(f"{url}{path}")
                if reply.status_code == 200:
                    counted = read(reply.json())
                    if counted is not None:
                        return counted
            metrics = self._http.get(f"{url}/metrics")
        except (httpx.HTTPError, ValueError):
            return None
        if metrics.status_code != 200:
            return None
        found = _BUSY.findall(metrics.text)
        return int(sum(float(value) for value in found)) if found else None


def _from_v1_loads(body: object) -> int | None:
    ranks = body.get("loads") if isinstance(body, dict) else None
    if not isinstance(ranks, list) or not ranks:
        return None
    total = 0
    for rank in ranks:
        if not isinstance(rank, dict) or "num_running_reqs" not in rank:
            return None
        total += int(rank.get("num_running_reqs") or 0) + int(rank.get("num_waiting_reqs") or 0)
    return total


def _from_get_load(body: object) -> int | None:
    ranks = body if isinstance(body, list) else [body]
    total = 0
    for rank in ranks:
        if not isinstance(rank, dict) or "num_reqs" not in rank:
            return None
        total += int(rank.get("num_reqs") or 0) + int(rank.get("num_waiting_reqs") or 0)
    return total


@dataclass(frozen=True)
class DrainResult:
    idle: bool
    busy: int | None  # the last answer: what still ran when the timeout ended
    waited_s: float


def wait_idle(
    probe: LoadProbe,
    url: str,
    clock: Clock,
    timeout_s: float,
    polls: int,
    interval_s: float,
    stop: Callable[[], bool] = lambda: False,
) -> DrainResult:
    """Poll until ``polls`` answers in a row say nothing runs, or ``timeout_s`` passes."""
    started = clock.monotonic()
    in_a_row = 0
    busy: int | None = None
    while True:
        busy = probe.busy(url)
        in_a_row = in_a_row + 1 if busy == 0 else 0
        waited = clock.monotonic() - started
        if in_a_row >= polls:
            return DrainResult(True, 0, waited)
        if waited >= timeout_s or stop():
            return DrainResult(False, busy, waited)
        clock.sleep(interval_s)
