"""The scheduler's jobs, as importable functions with picklable arguments (APScheduler stores a
job as a reference to its function and its arguments, never a bound method).

Each job names the scheduler it belongs to; the live :class:`JobTarget` of that name, registered
when the scheduler starts in this process, does the work. A job of a scheduler that is not
running here (its process stopped) does nothing.
"""

from __future__ import annotations

import threading
from typing import Protocol

__all__ = ["JobTarget", "forget", "heartbeat", "register", "report", "sample"]


class JobTarget(Protocol):
    def run_sample(self) -> None: ...

    def run_report(self, schedule_id: int) -> None: ...

    def run_heartbeat(self) -> None: ...


_LIVE: dict[str, JobTarget] = {}
_LIVE_LOCK = threading.Lock()


def register(name: str, target: JobTarget) -> None:
    with _LIVE_LOCK:
        _LIVE[name] = target


def forget(name: str, target: JobTarget) -> None:
    with _LIVE_LOCK:
        if _LIVE.get(name) is target:
            del _LIVE[name]


def _target(name: str) -> JobTarget | None:
    with _LIVE_LOCK:
        return _LIVE.get(name)


def sample(name: str) -> None:
    """Store a capacity sample of every host."""
    target = _target(name)
    if target is not None:
        target.run_sample()


def report(name: str, schedule_id: int) -> None:
    """Post schedule ``schedule_id``'s capacity report."""
    target = _target(name)
    if target is not None:
        target.run_report(schedule_id)


def heartbeat(name: str) -> None:
    """Renew the scheduler's lease and pick up schedules other bot processes added."""
    target = _target(name)
    if target is not None:
        target.run_heartbeat()
