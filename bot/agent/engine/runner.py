"""One operation, run in its own thread: stop, wait for the GPUs, start, follow, verify, and roll
back by itself when the new config does not come up.

Where it stands is a :class:`ResumePoint`, saved before each step that acts on the server (stage
apply or rollback; step stopping, waiting_gpus, starting, following; the start's number, pid and
time). A restarted agent resumes from it: a start recorded as begun is asked of the backend by its
marker (``ServerControl.started``) and adopted, never started twice; the start's log is re-read
from its beginning and the steps already recorded as events are skipped. The engine passes a
named :class:`CrashPoint` after each persisted step and between each side effect and its record.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.agent.cmdline import read_hicache, read_topology
from bot.agent.engine.context import Abandoned, RunnerContext, StartOutcome
from bot.agent.engine.crash_points import CrashPoint, SimulatedCrash
from bot.agent.engine.event_log import EventLog, iso
from bot.agent.engine.follower import StartFollower
from bot.agent.engine.gpu_wait import gpu_indices, wait_for_gpus_free
from bot.agent.engine.guard import PoolBudget, StartGuard
from bot.agent.engine.watcher import StartWatcher
from bot.agent.state.resume_point import ResumePoint, RollbackCause, Stage, Step
from bot.agent.state.views import RevisionOutcome, RevisionView
from bot.errors import (
    GpuProbeError,
    GpusBusyError,
    KimiOpsError,
    ProbeError,
    ServerControlError,
    StoreError,
)
from bot.vocab import EventPhase, FailureKind, OperationKind, OperationState

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
        self._state = OperationState.RUNNING
        self._point: ResumePoint | None = None

    @property
    def point(self) -> ResumePoint:
        assert self._point is not None, "read before the resume point was loaded"
        return self._point

    def _save(self, point: ResumePoint) -> None:
        self.ctx.state.save_resume_point(self.op_id, point)
        self._point = point

    def _crash_point(self, point: CrashPoint) -> None:
        stage = Stage.APPLY if self._point is None else self._point.stage
        self.ctx.crash_points.reach(point, stage)

    # -- the operation ------------------------------------------------------------------------

    def run(self) -> None:
        """Run to the end; on Abandoned the operation is left as it is for ``resume()``."""
        try:
            self._crash_point(CrashPoint.PLANNED)
            self._run()
        except Abandoned:
            log.info("operation %s left running for the next agent to resume", self.op_id)
        except SimulatedCrash as crash:  # a test's CrashAt: die here as a SIGKILL would
            log.info("operation %s: %s", self.op_id, crash)
        except Exception as exc:  # a bug or an unexpected backend failure: never a silent hang
            log.exception("operation %s failed unexpectedly", self.op_id)
            self._fail_unexpectedly(exc)

    def _fail_unexpectedly(self, exc: Exception) -> None:
        """Settle the operation and its revision as failed, saying where the server stands."""
        data: dict[str, Any] = {"kind": FailureKind.AGENT_ERROR.value, "message": str(exc),
                                "error": str(exc)}  # fmt: skip
        try:
            if self._point is not None:
                self.ctx.state.update_revision(
                    self._point.revision,
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
        point = self.ctx.state.resume_point(self.op_id)
        if point is None:
            raise StoreError(
                f"operation {self.op_id} has no resume point in the agent state; it cannot be "
                "resumed"
            )
        self._point = point
        if point.stage is Stage.ROLLBACK:
            self._roll_back()
            return
        outcome = self._attempt()
        if outcome.ready:
            self._record(outcome, RevisionOutcome.READY)
            self._finish(OperationState.READY, outcome.message, outcome.data, 1.0)
            return
        self._record(outcome, RevisionOutcome.FAILED)
        self.ctx.state.update_operation(self.op_id, failure=outcome.data)
        self._crash_point(CrashPoint.FAILURE_RECORDED)
        if not outcome.started:
            self._finish(OperationState.FAILED, outcome.message, outcome.data, None)
            return
        view = self.ctx.state.operation(self.op_id)
        if view is not None and view.kind is OperationKind.RESTART:
            self._restart_failed(outcome)
            return
        self._rollback(outcome)

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
        unhealthy but alive, it holds the GPUs and RAM for nothing."""
        if self.ctx.control.status().running:
            self.ctx.control.stop(self.ctx.settings.stop_grace_s)

    def _finish(
        self,
        state: OperationState,
        message: str,
        data: dict[str, Any],
        progress: float | None,
    ) -> None:
        # Outcome first, then the final event that makes the state final: whoever sees the
        # final state also sees the outcome and the finish time.
        self.ctx.state.update_operation(
            self.op_id, outcome=message, finished_at=iso(self.ctx.clock.now())
        )
        self._crash_point(CrashPoint.OUTCOME_RECORDED)
        self.events.emit(EventPhase(state.value), message, data, progress=progress, state=state)

    def _record(self, outcome: StartOutcome, result: RevisionOutcome) -> None:
        fields: dict[str, Any] = {"outcome": result, "finished_at": iso(self.ctx.clock.now())}
        if result is RevisionOutcome.READY:
            fields["became_ready"] = True
        for key in _REVISION_FIGURES:
            if outcome.data.get(key) is not None:
                fields[key] = outcome.data[key]
        self.ctx.state.update_revision(self.point.revision, **fields)

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
        self._crash_point(CrashPoint.ROLLBACK_REVISION_ADDED)
        self.ctx.state.update_operation(self.op_id, rollback_of=failed.revision)
        self._state = OperationState.ROLLING_BACK
        self._save(
            ResumePoint(
                stage=Stage.ROLLBACK,
                step=Step.STOPPING,
                revision=rev_id,
                argv=target.argv,
                starts=failed.starts,
                rollback=RollbackCause(target.id, failure.data, failure.message),
            )
        )
        self._crash_point(CrashPoint.ROLLBACK_RECORDED)
        self._roll_back()

    def _roll_back(self) -> None:
        """The rollback stage, from its resume point: say so (once: a resumed agent whose
        predecessor died before the event writes it now, as the audit reads the rollback's
        revisions from it), then start the config returned to."""
        point, cause = self.point, self.point.rollback
        assert cause is not None, "the rollback stage always records its cause"
        self._state = OperationState.ROLLING_BACK
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
        self._after_rollback(self._attempt())

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
        return self.ctx.state.add_revision(
            argv=list(target.argv),
            hicache=dict(target.hicache),
            created_at=iso(self.ctx.clock.now()),
            actor="kimi-ops (automatic rollback)",
            kind=OperationKind.ROLLBACK.value,
            rollback_of=failed,
            operation_id=self.op_id,
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
        self._finish(
            OperationState.FAILED,
            f"the rollback failed too ({outcome.message}); not retrying. "
            f"First failure: {cause.message}",
            dict(outcome.data, cause=dict(cause.data)),
            None,
        )

    # -- one start ----------------------------------------------------------------------------

    def _attempt(self) -> StartOutcome:
        ctx, point = self.ctx, self.point
        argv = list(point.argv)
        topology = read_topology(argv)
        applied = read_hicache(argv)
        self.events.new_start(point.expected_gb)
        if point.step is Step.STARTING and (
            ctx.control.started(point.marker(self.op_id)) or ctx.control.status().running
        ):
            # Recorded as begun and the backend has it (or a server runs, which after our stop
            # and GPU wait can only be ours): adopt it, never start a second one.
            self._adopt()
        elif point.step is not Step.FOLLOWING:
            refused = self._stop_wait_start(argv, topology.local_ranks)
            if refused is not None:
                return refused
            self._adopt()
        point = self.point
        t0 = point.t0 if point.t0 is not None else ctx.clock.now().timestamp()
        self.events.t0 = t0
        source = ctx.control.open_log(since=point.t0)
        follower = StartFollower(
            ctx,
            self.events.emit,
            StartWatcher(
                self.events.progress,
                topology.local_ranks,
                ratio=applied.effective().ratio,
                page_size=topology.page_size or 1,
            ),
            applied,
            point.pid,
            t0,
            lambda: self._state,
            self._guard(topology.local_ranks),
        )
        try:
            return follower.run(source)
        finally:
            source.close()

    def _guard(self, ranks: int) -> StartGuard | None:
        """The start's guard (None when ``[agent] guard = false``): the plan's budget, with its
        pools in the apply stage (a rollback starts another config: its logged pools count)."""
        settings = self.ctx.settings.guard
        if not settings.enabled:
            return None
        view = self.ctx.state.operation(self.op_id)
        budget = PoolBudget.from_plan(
            None if view is None else view.plan, with_pools=self.point.stage is Stage.APPLY
        )
        return StartGuard(settings, self.ctx.probe, budget, ranks)

    def _adopt(self) -> None:
        """Record the started server's pid and start time as the point to follow from."""
        status = self.ctx.control.status()
        started_at = status.started_at if status.started_at is not None else self.point.t0
        self._save(self.point.at(Step.FOLLOWING, pid=status.main_pid, t0=started_at))
        self._crash_point(CrashPoint.FOLLOWING_RECORDED)

    def _stop_wait_start(self, argv: list[str], ranks: int) -> StartOutcome | None:
        """Stop, wait for the GPUs and start; a StartOutcome (not started) when that cannot be."""
        ctx = self.ctx
        if self.point.step is Step.STOPPING:
            if ctx.control.read_command() != argv:
                # Only a change is written: rewriting the same line (a restart, a resumed step)
                # would replace the kept previous version with the current one.
                ctx.control.write_command(argv)
                self._crash_point(CrashPoint.COMMAND_WRITTEN)
            before = ctx.control.status()
            self.events.emit(
                EventPhase.STOPPING,
                f"stopping the server (pid {before.main_pid})"
                if before.running
                else "the server is not running; nothing to stop",
                {"pid": before.main_pid},
                step=Step.STOPPING.value,
            )
            stopped = ctx.control.stop(ctx.settings.stop_grace_s)
            self._crash_point(CrashPoint.STOP_SENT)
            self._save(self.point.at(Step.WAITING_GPUS))
            self._crash_point(CrashPoint.STOPPED_RECORDED)
            self.events.emit(
                EventPhase.WAITING_GPUS,
                f"stopped ({stopped.how}, {stopped.duration_s:.1f} s); waiting for the GPUs to "
                "free",
                {"how": stopped.how, "stop_s": round(stopped.duration_s, 2)},
                step=Step.WAITING_GPUS.value,
            )
        try:
            waited = wait_for_gpus_free(
                ctx.probe,
                ctx.clock,
                gpu_indices(ranks, ctx.settings.env),
                [],
                ctx.settings.gpu_free_timeout_s,
                min(1.0, ctx.settings.poll_interval_s),
            )
        except GpusBusyError as exc:
            return _not_started(exc, {"kind": FailureKind.GPU_BUSY.value,
                                      "processes": exc.processes})  # fmt: skip
        except KimiOpsError as exc:  # NVML failing ("GPU is lost"), the process table unreadable
            return _not_started(exc, {"kind": _kind_of(exc).value})
        self._crash_point(CrashPoint.GPUS_FREE)
        now = ctx.clock.now().timestamp()
        starts = self.point.starts + (0 if self.point.step is Step.STARTING else 1)
        self._save(self.point.at(Step.STARTING, starts=starts, t0=now))
        self._crash_point(CrashPoint.START_RECORDED)
        self.events.t0 = now
        note = f" ({waited.note})" if waited.note else ""
        self.events.emit(
            EventPhase.STARTING,
            f"GPUs free after {waited.waited_s:.1f} s{note}; starting "
            f"{read_hicache(argv).effective_phrase()}",
            {"gpus_free_s": round(waited.waited_s, 2), "ranks": ranks},
            step=Step.STARTING.value,
            progress=self.events.progress.at(EventPhase.STARTING),
        )
        try:
            ctx.control.start(self.point.marker(self.op_id))
        except KimiOpsError as exc:  # the backend refused: nothing runs, nothing to follow
            return _not_started(exc, {"kind": _kind_of(exc).value})
        self._crash_point(CrashPoint.SPAWNED)
        return None


def _not_started(exc: KimiOpsError, data: dict[str, Any]) -> StartOutcome:
    """The start could not begin (GPUs busy, the GPU probe or the backend failing): the
    operation fails without starting, the server left stopped."""
    message = f"not started: {str(exc).rstrip('.')}; the server is stopped"
    return StartOutcome(False, message, dict(data, message=str(exc)), started=False)


def _kind_of(exc: KimiOpsError) -> FailureKind:
    """The failure kind recorded for an error that kept the server from starting."""
    if isinstance(exc, GpuProbeError):
        return FailureKind.GPU_PROBE
    if isinstance(exc, ProbeError):
        return FailureKind.PROBE
    if isinstance(exc, ServerControlError):
        return FailureKind.BACKEND
    return FailureKind.AGENT_ERROR
