"""The resource limits of the agent and of the server it launches: open files, locked memory.

**The agent's file descriptors.** Every connection to the API holds one, and so do the state
database, the server's log, the clients to the server and the reads of ``/proc``. Out of them,
``accept()`` fails (and asyncio reports every failure), the follower cannot open the log and an
operation would fail on a healthy server. So the agent keeps ``RESERVED_FDS`` for its own work
and ``ACCEPT_BACKLOG`` for the connections it accepts in one turn of its event loop (a refused
one holds its descriptor until the next turn): at start it raises its soft ``RLIMIT_NOFILE``
toward ``max_connections`` plus both (as far as the hard limit, the unit's ``LimitNOFILE``,
allows) and serves at most what the soft limit leaves (:func:`connection_cap`), warning when that
is below ``[agent] max_connections``.

**The server's limits.** The process backend's server would inherit the agent's limits (often
1,024 files and 8 MiB of locked memory); SGLang's example unit (``deploy/sglang-kimi.service``)
gives it ``LimitNOFILE=65535`` and ``LimitMEMLOCK=infinity``. The backend sets the same in the
child before exec (:data:`SERVER_LIMITS`, :func:`fitted`); a process without
``CAP_SYS_RESOURCE`` cannot raise a hard limit, so each limit goes as high as the hard limit the
agent has, and the agent's unit sets those hard limits (``deploy/kimi-ops-agent.service``).

**Telling exhaustion apart.** :func:`out_of_descriptors` recognises ``EMFILE``/``ENFILE`` however
deep in an error's causes it sits, so the follower and the guard retry it instead of failing.
"""

from __future__ import annotations

import contextlib
import errno
import resource
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "ACCEPT_BACKLOG",
    "RESERVED_FDS",
    "SERVER_LIMITS",
    "Limit",
    "applier",
    "connection_cap",
    "descriptors_needed",
    "fitted",
    "out_of_descriptors",
    "raise_descriptor_limit",
]

#: Descriptors the agent keeps for its own files, clients and pipes, beside its connections.
RESERVED_FDS = 96
#: Connections the kernel queues for the agent, and so the most it accepts in one turn.
ACCEPT_BACKLOG = 32
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE})


@dataclass(frozen=True)
class Limit:
    """One resource limit: the ``resource`` module's constant and its soft and hard values
    (``resource.RLIM_INFINITY`` for none)."""

    name: str
    resource: int
    soft: int
    hard: int


#: What SGLang's example unit gives the server: ``LimitNOFILE=65535``, ``LimitMEMLOCK=infinity``.
SERVER_LIMITS: tuple[Limit, ...] = (
    Limit("NOFILE", resource.RLIMIT_NOFILE, 65535, 65535),
    Limit("MEMLOCK", resource.RLIMIT_MEMLOCK, resource.RLIM_INFINITY, resource.RLIM_INFINITY),
)


def _at_most(value: int, ceiling: int) -> int:
    if ceiling == resource.RLIM_INFINITY:
        return value
    if value == resource.RLIM_INFINITY:
        return ceiling
    return min(value, ceiling)


def fitted(
    wanted: Sequence[Limit], current: Callable[[int], tuple[int, int]] = resource.getrlimit
) -> tuple[Limit, ...]:
    """``wanted`` cut to the hard limits ``current`` reports (this process's by default): what
    an unprivileged child can set. The hard limit is kept as it is; a soft limit already above
    the wanted one is kept too (never lowered)."""
    out = []
    for limit in wanted:
        soft, hard = current(limit.resource)
        target = _at_most(limit.soft, hard)
        if soft == resource.RLIM_INFINITY or (target != resource.RLIM_INFINITY and soft >= target):
            target = soft
        out.append(Limit(limit.name, limit.resource, target, hard))
    return tuple(out)


def applier(limits: Sequence[Limit]) -> Callable[[], None]:
    """A ``preexec_fn`` setting ``limits`` in the child before exec. It only calls
    ``setrlimit`` with values computed beforehand (nothing else is safe between fork and exec
    in a threaded process) and ignores a refusal: the server then keeps the inherited limit."""
    frozen = tuple((limit.resource, (limit.soft, limit.hard)) for limit in limits)

    def apply() -> None:
        for which, values in frozen:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(which, values)

    return apply


def raise_descriptor_limit(wanted: int) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` toward ``wanted`` (no further than its hard
    limit, never lower); the soft limit it has afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _at_most(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def descriptors_needed(connections: int) -> int:
    """The open-file limit an agent serving ``connections`` at once needs."""
    return connections + RESERVED_FDS + ACCEPT_BACKLOG


def connection_cap(configured: int, soft_limit: int) -> int:
    """The connections the agent may hold: ``configured``, or fewer so that ``RESERVED_FDS`` and
    ``ACCEPT_BACKLOG`` stay free under ``soft_limit`` (at least 8: the API stays reachable)."""
    if soft_limit == resource.RLIM_INFINITY:
        return configured
    return max(8, min(configured, soft_limit - RESERVED_FDS - ACCEPT_BACKLOG))


def out_of_descriptors(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error it was raised from, is ``EMFILE`` or ``ENFILE``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _EXHAUSTED:
            return True
        exc = exc.__cause__ or exc.__context__
    return False
