"""One operation's sequence, run in its own thread: start the config asked for, record how it
ended, and roll back by itself to the last ready revision when the new config does not come up.

Where it stands is a :class:`ResumePoint` (stage apply or rollback; step stopping, waiting_gpus,
starting, following; the start's number, pid and time), held in an
:class:`~bot.agent.engine.position.OperationPosition` and saved before each step that acts on the
server. A restarted agent resumes from it: each stage's start is a
:class:`~bot.agent.engine.start_attempt.StartAttempt`, which adopts a start recorded as begun
instead of spawning a second; the start's log is re-read from its beginning and the steps already
recorded as events are skipped. The engine passes a named :class:`CrashPoint` after each
persisted step and between each side effect and its record.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.agent.cmdline import read_hicache
from bot.agent.engine.context import Abandoned, RunnerContext, StartOutcome
from bot.agent.engine.crash_points import CrashPoint, SimulatedCrash
from bot.agent.engine.event_log import EventLog, iso
from bot.agent.engine.position import OperationPosition
from bot.agent.engine.start_attempt import StartAttempt
from bot.agent.engine.state_writes import StateWrites
from bot.agent.state.resume_point import ResumePoint, RollbackCause, Stage, Step
from bot.agent.state.views import RevisionOutcome, RevisionView
from bot.errors import KimiOpsError
from bot.vocab import (
    HOST_FAILURE_KINDS,
    EventPhase,
    FailureKind,
    OperationKind,
    OperationState,
)

__all__ = ["Runner"]

log = logging.getLogger(__name__)

_REVISION_FIGURES = (
    "startup_s",
    "device_tokens",
    "kv_bytes_per_token",
    "host_gb_per_rank",
    "host_tokens_per_rank",
)


class Runner:
    """Carries out operation ``op_id`` from its saved resume point to a final state."""

    def __init__(self, ctx: RunnerContext, op_id: int) -> None:
        self.ctx = ctx
        self.op_id = op_id
        self.events = EventLog(ctx, op_id)
        self.position = OperationPosition(ctx, op_id)
        self.writes = StateWrites(ctx, op_id)

    @property
    def point(self) -> ResumePoint:
        return self.position.point

    def _start(self) -> StartOutcome:
        """Start the config at the resume point (or adopt its start) and follow it to its end."""
        return StartAttempt(self.position, self.events).run()

    def run(self) -> None:
        """Run to the end; on Abandoned the operation is left as it is for ``resume()``."""
        try:
            self.position.crash_point(CrashPoint.PLANNED)
            self._run()
        except Abandoned:
            log.info("operation %s left running for the next agent to resume", self.op_id)
        except SimulatedCrash as crash:  # a test's CrashAt: die here as a SIGKILL would
            log.info("operation %s: %s", self.op_id, crash)
        except Exception as exc:  # a bug or an unexpected backend failure: never a silent hang
            log.exception("operation %s failed unexpectedly", self.op_id)
            try:
                self._fail_unexpectedly(exc)
            except Abandoned:  # shut down while waiting to record it: resumed by the next
                log.info("operation %s left unfinished for the next agent", self.op_id)

    def _fail_unexpectedly(self, exc: Exception) -> None:
        """Settle the operation and its revision as failed, saying where the server stands."""
        data: dict[str, Any] = {"kind": FailureKind.AGENT_ERROR.value, "message": str(exc),
                                "error": str(exc)}  # fmt: skip
        try:
            if self.position.loaded:
                self.ctx.state.update_revision(
                    self.point.revision,
                    outcome=RevisionOutcome.FAILED,
                    finished_at=iso(self.ctx.clock.now()),
                )
            self.ctx.state.update_operation(self.op_id, failure=data)
        except KimiOpsError:
            log.exception("operation %s: could not record the failure", self.op_id)
        try:
            running = self.ctx.control.status().running
            where = "the server is running" if running else "the server is stopped"
        except KimiOpsError as status_exc:
            where = f"the server's state is unknown ({status_exc})"
        self._finish(OperationState.FAILED, f"the agent failed: {exc}; {where}", data, None)

    def _run(self) -> None:
        if self.position.load().stage is Stage.ROLLBACK:
            self._roll_back()
            return
        outcome = self._start()
        if outcome.ready:
            self._record(outcome, RevisionOutcome.READY)
            self._finish(OperationState.READY, outcome.message, outcome.data, 1.0)
            return
        self._record(outcome, RevisionOutcome.FAILED)
        self.writes.settle(
            "its failure", lambda: self.ctx.state.update_operation(self.op_id, failure=outcome.data)
        )
        self.position.crash_point(CrashPoint.FAILURE_RECORDED)
        if not outcome.started:
            self._finish(OperationState.FAILED, outcome.message, outcome.data, None)
            return
        view = self.ctx.state.operation(self.op_id)
        if view is not None and view.kind is OperationKind.RESTART:
            self._restart_failed(outcome)
            return
        if outcome.data.get("kind") in HOST_FAILURE_KINDS:
            self._host_cause(outcome)
            return
        self._rollback(outcome)

    def _host_cause(self, failure: StartOutcome) -> None:
        """A cause outside the config (a port another process holds, GPUs it occupies) kills
        any config started now: a rollback would only lose a second start to it."""
        self._stop_if_running()
        self._finish(
            OperationState.FAILED,
            f"{failure.message}; not rolling back: the cause ({failure.data['kind']}) is outside "
            "the config and an earlier config would die of it too. The server is stopped; free "
            "what holds it, then restart or roll back",
            failure.data,
            None,
        )

    def _restart_failed(self, failure: StartOutcome) -> None:
        """A restart changed no config, so no other config is started in its place: one nobody
        asked for could hold a different host pool. The server is left stopped."""
        self._stop_if_running()
        self._finish(
            OperationState.FAILED,
            f"{failure.message}; the restarted config (the current one) failed to start: the "
            "server is stopped; ask for a rollback to start an earlier config",
            failure.data,
            None,
        )

    def _stop_if_running(self) -> None:
        """A failed start left with no config to start in its place: if it is stuck or
        unhealthy but alive, it holds the GPUs and RAM for nothing. A stop that fails is
        logged and retried as a kill: the operation still ends, saying where the server is."""
        control = self.ctx.control
        try:
            if control.status().running:
                control.stop(self.ctx.settings.stop_grace_s)
        except KimiOpsError:
            log.exception("operation %s: stopping the failed server failed; killing", self.op_id)
            control.kill()

    def _finish(
        self,
        state: OperationState,
        message: str,
        data: dict[str, Any],
        progress: float | None,
    ) -> None:
        # Outcome first, then the final event that makes the state final: whoever sees the
        # final state also sees the outcome and the finish time.
        finished_at = iso(self.ctx.clock.now())
        self.writes.settle(
            "its outcome",
            lambda: self.ctx.state.update_operation(
                self.op_id, outcome=message, finished_at=finished_at
            ),
        )
        self.position.crash_point(CrashPoint.OUTCOME_RECORDED)
        self.events.emit(EventPhase(state.value), message, data, progress=progress, state=state)

    def _record(self, outcome: StartOutcome, result: RevisionOutcome) -> None:
        fields: dict[str, Any] = {"outcome": result, "finished_at": iso(self.ctx.clock.now())}
        if result is RevisionOutcome.READY:
            fields["became_ready"] = True
        for key in _REVISION_FIGURES:
            if outcome.data.get(key) is not None:
                fields[key] = outcome.data[key]
        revision = self.point.revision
        self.writes.settle(
            "its revision's outcome", lambda: self.ctx.state.update_revision(revision, **fields)
        )

    def _rollback(self, failure: StartOutcome) -> None:
        failed = self.point
        target = self.ctx.state.rollback_target(failed.revision, failed.argv)
        if target is None:
            self._stop_if_running()
            self._finish(
                OperationState.FAILED,
                f"{failure.message}; no earlier config became ready, so there is nothing to roll "
                "back to: the server is stopped until someone fixes the command line",
                failure.data,
                None,
            )
            return
        rev_id = self._rollback_revision(failed.revision, target)
        self.position.crash_point(CrashPoint.ROLLBACK_REVISION_ADDED)
        self.writes.settle(
            "its rollback",
            lambda: self.ctx.state.update_operation(self.op_id, rollback_of=failed.revision),
        )
        self.position.save(
            ResumePoint(
                stage=Stage.ROLLBACK,
                step=Step.STOPPING,
                revision=rev_id,
                argv=target.argv,
                starts=failed.starts,
                rollback=RollbackCause(target.id, failure.data, failure.message),
            )
        )
        self.position.crash_point(CrashPoint.ROLLBACK_RECORDED)
        self._roll_back()

    def _roll_back(self) -> None:
        """The rollback stage, from its resume point: say so (once: a resumed agent whose
        predecessor died before the event writes it now, as the audit reads the rollback's
        revisions from it), then start the config returned to."""
        point, cause = self.point, self.point.rollback
        assert cause is not None, "the rollback stage always records its cause"
        self.events.stage = Stage.ROLLBACK.value
        self.events.new_start(None)
        self.events.emit(
            EventPhase.ROLLING_BACK,
            f"{cause.message}; rolling back to revision {cause.target} "
            f"({read_hicache(list(point.argv)).effective_phrase()})",
            {
                "cause": dict(cause.data),
                "target_revision": cause.target,
                "revision": point.revision,
            },
            step="rolling_back",
            progress=0.0,
            state=OperationState.ROLLING_BACK,
        )
        self._after_rollback(self._start())

    def _rollback_revision(self, failed: int, target: RevisionView) -> int:
        """The revision the automatic rollback runs: the one this operation already added if an
        agent died after adding it (its resume point still at the failed start), else a new one."""
        for revision in self.ctx.state.revisions():
            if (
                revision.operation_id == self.op_id
                and revision.kind == OperationKind.ROLLBACK
                and revision.rollback_of == failed
            ):
                return revision.id
        created_at = iso(self.ctx.clock.now())
        return self.writes.settle(
            "the rollback's revision",
            lambda: self.ctx.state.add_revision(
                argv=list(target.argv),
                hicache=dict(target.hicache),
                created_at=created_at,
                actor="kimi-ops (automatic rollback)",
                kind=OperationKind.ROLLBACK.value,
                rollback_of=failed,
                operation_id=self.op_id,
            ),
        )

    def _after_rollback(self, outcome: StartOutcome) -> None:
        cause = self.point.rollback
        assert cause is not None, "the rollback stage always records its cause"
        if outcome.ready:
            self._record(outcome, RevisionOutcome.READY)
            self._finish(
                OperationState.ROLLED_BACK,
                f"rolled back: {outcome.message}. Cause: {cause.message}",
                dict(outcome.data, cause=dict(cause.data)),
                1.0,
            )
            return
        self._record(outcome, RevisionOutcome.FAILED)
        # Whatever the failure (timeout, health, a mismatch: the server may well be alive),
        # the server is left stopped for a person, as the README promises.
        self._stop_if_running()
        self._finish(
            OperationState.FAILED,
            f"the rollback failed too ({outcome.message}); not retrying: the server is stopped. "
            f"First failure: {cause.message}",
            dict(outcome.data, cause=dict(cause.data)),
            None,
        )
