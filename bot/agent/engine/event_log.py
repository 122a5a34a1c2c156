"""An operation's events as the runner writes them: each named step once, with the start's elapsed
time and ETA.

Every event that marks a step carries ``data["step"]`` (``"apply:stopping"``,
``"rollback:phase:http"``): after an agent restart the start's log is read again from its
beginning and the steps already recorded are skipped, so no event is duplicated and none is lost.

An event the state directory refuses (a full disk) is kept in memory and written, in order, with
the next one that can be: the start goes on meanwhile, its guard with it. The final event, which
makes the operation's state final, is written before the runner goes on
(:mod:`bot.agent.engine.state_writes`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.agent.engine.context import RunnerContext
from bot.agent.engine.progress import ProgressModel, eta_seconds
from bot.agent.engine.state_writes import StateWrites
from bot.errors import StoreError
from bot.planner import StartSample, estimate_startup_seconds
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationState

__all__ = ["EventLog", "iso"]


def iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds")


class EventLog:
    """Writes operation ``op_id``'s events; ``stage`` prefixes the step keys."""

    def __init__(self, ctx: RunnerContext, op_id: int) -> None:
        self.ctx = ctx
        self.op_id = op_id
        self.stage = "apply"
        self.progress = ProgressModel()
        self.t0: float | None = None  # Unix time the current start began
        self.samples: list[StartSample] = []
        self.writes = StateWrites(ctx, op_id)
        self._pending: list[dict[str, Any]] = []  # refused by the state, oldest first
        self._steps = {
            str(e.data["step"]) for e in ctx.state.events(op_id) if "step" in e.data
        }  # already recorded: skipped when a resumed start's log is read again

    def new_start(self, expected_gb: float | None) -> None:
        """A start (or a resumed one) begins: fresh progress, this host's samples for the ETA."""
        self.progress = ProgressModel(expected_gb)
        self.samples = self.ctx.state.startup_samples()
        self.t0 = None

    def emit(
        self,
        phase: EventPhase,
        message: str,
        data: dict[str, Any] | None = None,
        *,
        step: str | None = None,
        progress: float | None = None,
        state: OperationState | None = None,
    ) -> None:
        payload = dict(data or {})
        if step is not None:
            key = f"{self.stage}:{step}"
            if key in self._steps:
                if state is not None:  # recorded before a restart; the state still changes
                    self.writes.settle(
                        "the operation's state",
                        lambda: self.ctx.state.update_operation(self.op_id, state=state),
                    )
                return
            self._steps.add(key)
            payload["step"] = key
        if self.t0 is not None:
            elapsed = max(0.0, self.ctx.clock.now().timestamp() - self.t0)
            payload.setdefault("elapsed_s", round(elapsed, 1))
            # This host's earlier starts, scaled to the pool: as planned, then as logged.
            expected = estimate_startup_seconds(self.samples, self.progress.host_gb_per_rank)
            eta = eta_seconds(elapsed, self.progress.last, expected)
            if eta is not None:
                payload.setdefault("eta_s", eta)
        self._pending.append(
            {
                "at": iso(self.ctx.clock.now()),
                "phase": phase,
                "message": message,
                "progress": self.progress.last if progress is None else progress,
                "data": payload,
                "state": state,
            }
        )
        if state is not None and state in FINAL_OPERATION_STATES:
            self.writes.settle("the operation's final event", self._flush_or_raise)
        else:
            self.flush()

    def flush(self) -> bool:
        """Write the events kept in memory, oldest first; False when the state refused one."""
        try:
            self._flush_or_raise()
        except StoreError as exc:
            self.writes.refused(f"{len(self._pending)} event(s)", exc)
            return False
        self.writes.written()
        return True

    def _flush_or_raise(self) -> None:
        while self._pending:
            self.ctx.state.append_event(self.op_id, **self._pending[0])
            self._pending.pop(0)
