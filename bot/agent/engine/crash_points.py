"""Named points where an agent can die mid-operation, and a hook that makes it die there.

The engine calls ``crash_points.reach(CrashPoint.X, stage)`` after each step it persists and
between each side effect on the server and the record of it. A start passes the same points in
either stage (the config asked for, or the one rolled back to), so a point is named together with
its :class:`Stage`. In production the hook does nothing (``NO_CRASHES``); a test passes
``CrashAt(point, stage)``, which raises :class:`SimulatedCrash` there, then builds a fresh engine
on the same state directory and checks that the resumed operation ends as it would have, each
config started exactly once. The lists are the contract: a new step that writes to the server or
the state gets its points here, and the crash test covers it.

``APPLY_POINTS`` are the points a start that comes up passes; ``ROLLBACK_POINTS`` those a failed
start and its rollback pass after the failure (the apply stage's points before the failure are
the same as in ``APPLY_POINTS``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from bot.agent.state.resume_point import Stage

__all__ = [
    "APPLY_POINTS",
    "NO_CRASHES",
    "ROLLBACK_POINTS",
    "CrashAt",
    "CrashPoint",
    "CrashPoints",
    "NoCrashes",
    "SimulatedCrash",
]


class CrashPoint(StrEnum):
    """Where an agent can be killed; in the order an operation passes them."""

    PLANNED = "planned"  # the operation, its revision and resume point are recorded
    STOP_SENT = "stop_sent"  # the server is stopped; the next step is not recorded yet
    STOPPED_RECORDED = "stopped_recorded"  # "waiting for the GPUs" is the resume point
    GPUS_FREE = "gpus_free"  # the GPUs are free; the command line is not written yet
    COMMAND_WRITTEN = "command_written"  # the new command line is written; start not recorded
    START_RECORDED = "start_recorded"  # the start is recorded (its number), not yet spawned
    SPAWNED = "spawned"  # the server is spawned; its pid is not recorded yet
    FOLLOWING_RECORDED = "following_recorded"  # its pid and start time are the resume point
    OUTCOME_RECORDED = "outcome_recorded"  # the outcome is recorded, the final event is not
    # A start that failed, on its way to the rollback:
    FAILURE_RECORDED = "failure_recorded"  # the failed revision and the cause are recorded
    ROLLBACK_REVISION_ADDED = "rollback_revision_added"  # the config returned to is a revision
    ROLLBACK_RECORDED = "rollback_recorded"  # the resume point is the rollback; no event yet


# One start, in either stage, from the command line written to the final event.
_START_POINTS = (
    CrashPoint.STOP_SENT,
    CrashPoint.STOPPED_RECORDED,
    CrashPoint.GPUS_FREE,
    CrashPoint.COMMAND_WRITTEN,
    CrashPoint.START_RECORDED,
    CrashPoint.SPAWNED,
    CrashPoint.FOLLOWING_RECORDED,
    CrashPoint.OUTCOME_RECORDED,
)
#: What a start that comes up passes, in order.
APPLY_POINTS: tuple[tuple[Stage, CrashPoint], ...] = (
    (Stage.APPLY, CrashPoint.PLANNED),
    *((Stage.APPLY, point) for point in _START_POINTS),
)
#: What a failed start passes after its failure, and its rollback's start, in order.
ROLLBACK_POINTS: tuple[tuple[Stage, CrashPoint], ...] = (
    (Stage.APPLY, CrashPoint.FAILURE_RECORDED),
    (Stage.APPLY, CrashPoint.ROLLBACK_REVISION_ADDED),
    (Stage.ROLLBACK, CrashPoint.ROLLBACK_RECORDED),
    *((Stage.ROLLBACK, point) for point in _START_POINTS),
)


class SimulatedCrash(BaseException):
    """The agent "dies" here. A ``BaseException`` on purpose: the runner's catch-all for
    unexpected errors (which settles the operation as failed) must not see it, as it would not
    see a SIGKILL."""


class CrashPoints(Protocol):
    """The hook the engine calls at each :class:`CrashPoint`, in the stage it is in."""

    def reach(self, point: CrashPoint, stage: Stage) -> None: ...


class NoCrashes:
    """Production: every point passes."""

    def reach(self, point: CrashPoint, stage: Stage) -> None:
        return None


class CrashAt:
    """Raise :class:`SimulatedCrash` the first time ``point`` is reached in ``stage`` (a resumed
    engine on the same state uses another hook, as a restarted agent would)."""

    def __init__(self, point: CrashPoint, stage: Stage = Stage.APPLY) -> None:
        self.point = point
        self.stage = stage
        self.crashed = False

    def reach(self, point: CrashPoint, stage: Stage) -> None:
        if point == self.point and stage == self.stage and not self.crashed:
            self.crashed = True
            raise SimulatedCrash(f"simulated crash at {stage}:{point}")


NO_CRASHES: CrashPoints = NoCrashes()
