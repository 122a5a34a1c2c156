"""Where an operation stands, saved before each step that acts on the server, so a restarted
agent resumes it: a frozen, versioned value, stored as JSON in the operation's row::

    {"version": 1, "stage": "apply", "step": "following", "revision": 12,
     "argv": ["python3", "-m", "sglang.launch_server", ...], "expected_gb": 31.6,
     "starts": 1, "pid": 4242, "t0": 1767000000.5, "rollback": null}

``starts`` counts the starts this operation began; it is recorded *before* each spawn and names
the start (``marker``, e.g. ``"7:1"``) so the backend can tell whether a start it may have made
happened (see ``ServerControl.started``). ``rollback`` is set in the rollback stage: the revision
returned to and why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from bot.errors import StoreError

__all__ = ["RESUME_POINT_VERSION", "ResumePoint", "RollbackCause", "Stage", "Step"]

RESUME_POINT_VERSION = 1


class Stage(StrEnum):
    """Which config the operation is starting: the one asked for, or the one rolled back to."""

    APPLY = "apply"
    ROLLBACK = "rollback"


class Step(StrEnum):
    """The next thing to do within a stage."""

    STOPPING = "stopping"  # write the command line, stop the server
    WAITING_GPUS = "waiting_gpus"  # stopped: wait for the GPUs, then start
    STARTING = "starting"  # a start is recorded; it may or may not have been spawned
    FOLLOWING = "following"  # the start's pid and time are recorded: follow its log


@dataclass(frozen=True)
class RollbackCause:
    """The rollback stage's target and why it began (the apply stage's failure)."""

    target: int
    data: Mapping[str, Any]
    message: str


@dataclass(frozen=True)
class ResumePoint:
    """One operation's position (see the module docstring)."""

    VERSION: ClassVar[int] = RESUME_POINT_VERSION

    stage: Stage
    step: Step
    revision: int
    argv: tuple[str, ...]
    expected_gb: float | None = None
    starts: int = 0
    pid: int | None = None
    t0: float | None = None
    rollback: RollbackCause | None = field(default=None)

    def at(self, step: Step, **changes: Any) -> ResumePoint:
        """This point moved on to ``step`` (with other fields changed too)."""
        return dataclasses.replace(self, step=step, **changes)

    def marker(self, op_id: int) -> str:
        """The name of this operation's current start, as handed to the backend."""
        return f"{op_id}:{self.starts}"

    def to_json(self) -> dict[str, Any]:
        rollback = None
        if self.rollback is not None:
            rollback = {
                "target": self.rollback.target,
                "data": dict(self.rollback.data),
                "message": self.rollback.message,
            }
        return {
            "version": self.VERSION,
            "stage": self.stage.value,
            "step": self.step.value,
            "revision": self.revision,
            "argv": list(self.argv),
            "expected_gb": self.expected_gb,
            "starts": self.starts,
            "pid": self.pid,
            "t0": self.t0,
            "rollback": rollback,
        }

    @classmethod
    def from_json(cls, value: object) -> ResumePoint:
        """Parse what ``to_json`` wrote; a StoreError names what is wrong otherwise."""
        if not isinstance(value, dict) or value.get("version") != cls.VERSION:
            raise StoreError(
                f"resume point {value!r} is not a version-{cls.VERSION} record; the state file "
                "was written by another agent version"
            )
        try:
            raw = value["rollback"]
            rollback = (
                None
                if raw is None
                else RollbackCause(int(raw["target"]), dict(raw["data"]), str(raw["message"]))
            )
            return cls(
                stage=Stage(value["stage"]),
                step=Step(value["step"]),
                revision=int(value["revision"]),
                argv=tuple(str(a) for a in value["argv"]),
                expected_gb=_float_or_none(value["expected_gb"]),
                starts=int(value["starts"]),
                pid=None if value["pid"] is None else int(value["pid"]),
                t0=_float_or_none(value["t0"]),
                rollback=rollback,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"resume point {value!r} is malformed: {exc!r}") from exc

    @classmethod
    def from_legacy_cursor(cls, cursor: Mapping[str, Any]) -> ResumePoint:
        """The schema-1 cursor dict (``{"stage", "step", "rev_id", "argv", "expected_gb", "pid",
        "t0", "target", "cause", "cause_message"}``, any key possibly absent) as a resume
        point; used once, by the state file's migration to schema 2."""
        stage = Stage(cursor.get("stage", Stage.APPLY.value))
        rollback = None
        if stage is Stage.ROLLBACK:
            rollback = RollbackCause(
                target=int(cursor["target"]),
                data=dict(cursor.get("cause") or {}),
                message=str(cursor.get("cause_message", "the new config failed")),
            )
        step = Step(cursor.get("step", Step.STOPPING.value))
        return cls(
            stage=stage,
            step=step,
            revision=int(cursor["rev_id"]),
            argv=tuple(str(a) for a in cursor["argv"]),
            expected_gb=_float_or_none(cursor.get("expected_gb")),
            # A schema-1 agent recorded no start number; one past "starting" had begun one.
            starts=1 if step in (Step.STARTING, Step.FOLLOWING) else 0,
            pid=None if cursor.get("pid") is None else int(cursor["pid"]),
            t0=_float_or_none(cursor.get("t0")),
            rollback=rollback,
        )


def _float_or_none(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{value!r} is not a number")
    return float(value)
