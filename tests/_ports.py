"""Ports for the servers tests start, one range per pytest-xdist worker.

A port the OS picks with ``bind(("127.0.0.1", 0))`` and releases at once can be picked again by
another worker before the server meant for it binds: that server then fails to start while its
test talks to the other worker's server on the same port. Each worker hands out ports from its
own range, in turn, below Linux's ephemeral range (32768-60999), where neither another worker
nor an outgoing connection or a server bound to port 0 takes them.

``KIMI_TEST_PORT_BASE`` moves the whole block of ranges, so two checkouts whose suites run at the
same time on one machine (two worktrees) hand out ports from blocks that do not overlap.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator

__all__ = ["free_port"]

_BASE = int(os.environ.get("KIMI_TEST_PORT_BASE", "10000"))
_SPAN, _WORKERS = 2_000, 8


def _worker_index() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # gw0, gw1, ...; unset without xdist
    digits = name.removeprefix("gw")
    return int(digits) % _WORKERS if digits.isdigit() else 0


def _candidates() -> Iterator[int]:
    low = _BASE + _worker_index() * _SPAN
    if low + _SPAN > 32_768:
        raise RuntimeError(f"KIMI_TEST_PORT_BASE={_BASE} puts worker ports in the ephemeral range")
    start = random.randrange(_SPAN)  # a restarted worker does not replay its predecessor's ports
    for step in itertools.count():
        yield low + (start + step) % _SPAN


_NEXT = _candidates()


def free_port() -> int:
    """A port of this worker's range that nothing is bound to now (never the same one twice in
    a row: the range is walked in turn, so a port just released is not handed out again soon)."""
    for _ in range(_SPAN):
        port = next(_NEXT)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in this worker's range of {_SPAN} ports")
