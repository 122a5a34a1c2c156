"""The router's circuit breakers, read from its Prometheus export.

A worker whose requests failed (a replica restarted by hand while still in the router) gets its
breaker opened by the router, which then sends it nothing until the breaker's timeout
(``--cb-timeout-duration-secs``, 60 s by default) lets a few requests through again (half-open)
and enough of them succeed to close it. Taking a replica out while the others' breakers are open
leaves the router nothing to send to: it answers 503 ``no_available_workers``. ``GET /workers``
does not show the breakers; the router's Prometheus export does, one gauge line per worker, on
its own port (``--prometheus-port``, 29000 by default, path ``/metrics``)::

    smg_worker_cb_state{worker="http://10.0.0.11:30000"} 1     (sglang-router 0.3.x)
    sgl_router_cb_state{worker="http://10.0.0.11:30000"} 0     (sglang-router 0.2.x)
    -> {"http://10.0.0.11:30000": Breaker.OPEN}, ...

with 0 closed, 1 open, 2 half-open (checked against both wheels, ``docs/router.md``).
sglang-router 0.1.x has no circuit breaker. A worker that has no line yet has never failed a
request, so its breaker is closed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum

__all__ = ["Breaker", "breaker_states"]


class Breaker(StrEnum):
    """A worker's circuit breaker at the router."""

    CLOSED = "closed"  # requests flow to it
    OPEN = "open"  # the router sends it nothing until the breaker's timeout
    HALF_OPEN = "half-open"  # the router tries a few requests; enough successes close it


_BY_GAUGE: dict[float, Breaker] = {0: Breaker.CLOSED, 1: Breaker.OPEN, 2: Breaker.HALF_OPEN}

# smg_worker_cb_state{worker="http://127.0.0.1:32799"} 0   (0.3.x; 0.2.x: sgl_router_cb_state)
_LINE = re.compile(
    r'^(?:smg_worker|sgl_router)_cb_state\{(?:[^}]*,)?worker="(?P<url>[^"]+)"[^}]*\}'
    r"\s+(?P<value>\S+)\s*$",
    re.M,
)


def breaker_states(text: str) -> Mapping[str, Breaker]:
    """Each worker's breaker in a router's Prometheus text, by worker URL (no trailing slash);
    a value outside the three known reads as open, never as closed."""
    found: dict[str, Breaker] = {}
    for match in _LINE.finditer(text):
        try:
            value = float(match["value"])
        except ValueError:
            value = float("nan")
        # 1.0 == 1 hashes alike, so the gauge's float finds its state; NaN or 3 find none.
        found[match["url"].rstrip("/")] = _BY_GAUGE.get(value, Breaker.OPEN)
    return found
