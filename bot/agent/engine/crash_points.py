"""Named points where an agent can die mid-operation, and a hook that makes it die there.

The engine calls ``crash_points.reach(CrashPoint.X)`` after each step it persists and between
each side effect on the server and the record of it. In production the hook does nothing
(``NO_CRASHES``); a test passes ``CrashAt(point)``, which raises :class:`SimulatedCrash` there,
then builds a fresh engine on the same state directory and checks that the resumed operation
ends as it would have, the server started exactly once. The list is the contract: a new step
that writes to the server or the state gets its points here, and the crash test covers it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

__all__ = ["NO_CRASHES", "CrashAt", "CrashPoint", "CrashPoints", "NoCrashes", "SimulatedCrash"]


class CrashPoint(StrEnum):
    """Where, in one start, an agent can be killed; in the order a start passes them."""

    PLANNED = "planned"  # the operation, its revision and resume point are recorded
    COMMAND_WRITTEN = "command_written"  # the new command line is written, not yet stopping
    STOP_SENT = "stop_sent"  # the server is stopped; the next step is not recorded yet
    STOPPED_RECORDED = "stopped_recorded"  # "waiting for the GPUs" is the resume point
    GPUS_FREE = "gpus_free"  # the GPUs are free; the start is not recorded yet
    START_RECORDED = "start_recorded"  # the start is recorded (its number), not yet spawned
    SPAWNED = "spawned"  # the server is spawned; its pid is not recorded yet
    FOLLOWING_RECORDED = "following_recorded"  # its pid and start time are the resume point
    OUTCOME_RECORDED = "outcome_recorded"  # the outcome is recorded, the final event is not


class SimulatedCrash(BaseException):
    """The agent "dies" here. A ``BaseException`` on purpose: the runner's catch-all for
    unexpected errors (which settles the operation as failed) must not see it, as it would not
    see a SIGKILL."""


class CrashPoints(Protocol):
    """The hook the engine calls at each :class:`CrashPoint`."""

    def reach(self, point: CrashPoint) -> None: ...


class NoCrashes:
    """Production: every point passes."""

    def reach(self, point: CrashPoint) -> None:
        return None


class CrashAt:
    """Raise :class:`SimulatedCrash` the first time ``point`` is reached (a resumed engine on
    the same state uses another hook, as a restarted agent would)."""

    def __init__(self, point: CrashPoint) -> None:
        self.point = point
        self.crashed = False

    def reach(self, point: CrashPoint) -> None:
        if point == self.point and not self.crashed:
            self.crashed = True
            raise SimulatedCrash(f"simulated crash at {point}")


NO_CRASHES: CrashPoints = NoCrashes()
