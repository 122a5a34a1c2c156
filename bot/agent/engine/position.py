"""Where one operation stands while it runs: its :class:`ResumePoint` as loaded from the agent
state, saved again before each step that acts on the server, and the named crash points passed
between a side effect and its record.

The runner (the operation's sequence) and the start attempt (one start to its end) move the
same point on, so they share one :class:`OperationPosition`.
"""

from __future__ import annotations

from bot.agent.engine.context import RunnerContext
from bot.agent.engine.crash_points import CrashPoint
from bot.agent.engine.state_writes import StateWrites
from bot.agent.state.resume_point import ResumePoint, Stage
from bot.errors import StoreError

__all__ = ["OperationPosition"]


class OperationPosition:
    """Operation ``op_id``'s resume point, read with :meth:`load` and moved on with :meth:`save`."""

    def __init__(self, ctx: RunnerContext, op_id: int) -> None:
        self.ctx = ctx
        self.op_id = op_id
        self.writes = StateWrites(ctx, op_id)
        self._point: ResumePoint | None = None

    @property
    def loaded(self) -> bool:
        return self._point is not None

    @property
    def point(self) -> ResumePoint:
        assert self._point is not None, "read before the resume point was loaded"
        return self._point

    def load(self) -> ResumePoint:
        """The saved resume point; a StoreError when the operation has none."""
        point = self.ctx.state.resume_point(self.op_id)
        if point is None:
            raise StoreError(
                f"operation {self.op_id} has no resume point in the agent state; it cannot be "
                "resumed"
            )
        self._point = point
        return point

    def save(self, point: ResumePoint) -> None:
        """Saved before the step acts: on a full disk it waits for room rather than act
        without its record (``bot.agent.engine.state_writes``)."""
        self.writes.settle(
            "its resume point", lambda: self.ctx.state.save_resume_point(self.op_id, point)
        )
        self._point = point

    def crash_point(self, point: CrashPoint) -> None:
        """Pass ``point``; a test's crash schedule may end the engine here."""
        stage = Stage.APPLY if self._point is None else self._point.stage
        self.ctx.crash_points.reach(point, stage)
