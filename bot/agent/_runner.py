"""One operation, run in its own thread: stop, wait for the GPUs, start, follow, verify, and roll
back by itself when the new config does not come up.

Where it stands is saved in the operation's ``cursor`` before each step that acts on the server
(stage "apply" or "rollback"; step "stopping", "starting", "following"; the pid it started), so
a restarted agent resumes it: it re-attaches to the server it started (never starting it twice),
re-reads that start's log from its beginning and skips the steps already recorded as events.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from bot.agent._follow import Abandoned, Outcome, RunnerContext, SGLangLike, StartFollower
from bot.agent._progress import ProgressModel, eta_seconds
from bot.agent._verify import gpu_indices
from bot.agent._watch import StartWatcher
from bot.agent.cmdline import read_hicache, read_topology
from bot.agent.gpu_wait import wait_for_gpus_free
from bot.errors import (
    GpuProbeError,
    GpusBusyError,
    KimiOpsError,
    ProbeError,
    ServerControlError,
)
from bot.planner import StartSample, estimate_startup_seconds

__all__ = ["Abandoned", "Runner", "RunnerContext", "SGLangLike"]

log = logging.getLogger(__name__)


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds")


class Runner:
    """Carries out operation ``op_id`` from its saved cursor to a final state."""

    def __init__(self, ctx: RunnerContext, op_id: int) -> None:
        self.ctx = ctx
        self.op_id = op_id
        self._steps = {
            str(e.data["step"]) for e in ctx.state.events(op_id) if "step" in e.data
        }  # already recorded: skipped when a resumed start's log is read again
        self._state = "running"
        self._progress = ProgressModel()
        self._cursor: dict[str, Any] = {}
        self._t0: float | None = None  # Unix time the current start began
        self._samples: list[StartSample] = []

    # -- events -------------------------------------------------------------------------------

    def emit(
        self,
        phase: str,
        message: str,
        data: dict[str, Any] | None = None,
        *,
        step: str | None = None,
        progress: float | None = None,
        state: str | None = None,
    ) -> None:
        payload = dict(data or {})
        if step is not None:
            key = f"{self._stage}:{step}"
            if key in self._steps:
                if state is not None:  # recorded before a restart; the state still changes
                    self.ctx.state.update_operation(self.op_id, state=state)
                return
            self._steps.add(key)
            payload["step"] = key
        if self._t0 is not None:
            elapsed = max(0.0, self.ctx.clock.now().timestamp() - self._t0)
            payload.setdefault("elapsed_s", round(elapsed, 1))
            # This host's earlier starts, scaled to the pool: as planned, then as logged.
            expected = estimate_startup_seconds(self._samples, self._progress.host_gb_per_rank)
            eta = eta_seconds(elapsed, self._progress.last, expected)
            if eta is not None:
                payload.setdefault("eta_s", eta)
        self.ctx.state.append_event(
            self.op_id,
            at=_iso(self.ctx.clock.now()),
            phase=phase,
            message=message,
            progress=self._progress.last if progress is None else progress,
            data=payload,
            state=state,
        )

    def _save(self, **fields: Any) -> None:
        self._cursor.update(fields)
        self.ctx.state.update_operation(self.op_id, cursor=dict(self._cursor))

    # -- the operation ------------------------------------------------------------------------

    def run(self) -> None:
        """Run to the end; on Abandoned the operation is left as it is for ``resume()``."""
        try:
            self._run()
        except Abandoned:
            log.info("operation %s left running for the next agent to resume", self.op_id)
        except Exception as exc:  # a bug or an unexpected backend failure: never a silent hang
            log.exception("operation %s failed unexpectedly", self.op_id)
            self._fail_unexpectedly(exc)

    def _fail_unexpectedly(self, exc: Exception) -> None:
        """Settle the operation and its revision as failed, saying where the server stands."""
        data: dict[str, Any] = {"kind": "agent_error", "message": str(exc), "error": str(exc)}
        rev_id = self._cursor.get("rev_id")
        try:
            if rev_id is not None:
                self.ctx.state.update_revision(
                    int(rev_id), outcome="failed", finished_at=_iso(self.ctx.clock.now())
                )
            self.ctx.state.update_operation(self.op_id, failure=data)
        except KimiOpsError:
            log.exception("operation %s: could not record the failure", self.op_id)
        try:
            running = self.ctx.control.status().running
            where = "the server is running" if running else "the server is stopped"
        except KimiOpsError as status_exc:
            where = f"the server's state is unknown ({status_exc})"
        self._finish("failed", f"the agent failed: {exc}; {where}", data, None)

    def _run(self) -> None:
        self._cursor = self.ctx.state.cursor(self.op_id)
        if self._cursor.get("stage") == "rollback":
            self._state = "rolling_back"
            self._after_rollback(self._attempt())
            return
        outcome = self._attempt()
        if outcome.ready:
            self._record(outcome, "ready")
            self._finish("ready", outcome.message, outcome.data, 1.0)
            return
        self._record(outcome, "failed")
        self.ctx.state.update_operation(self.op_id, failure=outcome.data)
        if outcome.data.get("no_start"):
            self._finish("failed", outcome.message, outcome.data, None)
            return
        view = self.ctx.state.operation(self.op_id)
        if view is not None and view.kind == "restart":
            self._restart_failed(outcome)
            return
        self._rollback(outcome)

    def _restart_failed(self, failure: Outcome) -> None:
        """A restart changed no config, so no other config is started in its place: one nobody
        asked for could hold a different host pool. The server is left stopped."""
        if self.ctx.control.status().running:
            # Stuck or unhealthy but alive: it holds the GPUs and RAM for nothing.
            self.ctx.control.stop(self.ctx.settings.stop_grace_s)
        self._finish(
            "failed",
            f"{failure.message}; the restarted config (the current one) failed to start: the "
            "server is stopped; ask for a rollback to start an earlier config",
            failure.data,
            None,
        )

    @property
    def _stage(self) -> str:
        return str(self._cursor.get("stage", "apply"))

    def _finish(
        self, state: str, message: str, data: dict[str, Any], progress: float | None
    ) -> None:
        # Outcome first, then the final event that makes the state final: whoever sees the
        # final state also sees the outcome and the finish time.
        self.ctx.state.update_operation(
            self.op_id, outcome=message, finished_at=_iso(self.ctx.clock.now())
        )
        self.emit(state, message, data, progress=progress, state=state)

    def _record(self, outcome: Outcome, result: str) -> None:
        data = outcome.data
        fields: dict[str, Any] = {"outcome": result, "finished_at": _iso(self.ctx.clock.now())}
        if result == "ready":
            fields["became_ready"] = True
        for key in (
            "startup_s",
            "device_tokens",
            "kv_bytes_per_token",
            "host_gb_per_rank",
            "host_tokens_per_rank",
        ):
            if data.get(key) is not None:
                fields[key] = data[key]
        self.ctx.state.update_revision(int(self._cursor["rev_id"]), **fields)

    def _rollback(self, failure: Outcome) -> None:
        failed_rev = int(self._cursor["rev_id"])
        argv = list(self._cursor["argv"])
        target = next(
            (
                r
                for r in self.ctx.state.revisions()
                if r.became_ready and r.id != failed_rev and list(r.argv) != argv
            ),
            None,
        )
        if target is None:
            if self.ctx.control.status().running:
                # Stuck or unhealthy but alive: it holds the GPUs and RAM for nothing.
                self.ctx.control.stop(self.ctx.settings.stop_grace_s)
            self._finish(
                "failed",
                f"{failure.message}; no earlier config became ready, so there is nothing to roll "
                "back to: the server is stopped until someone fixes the command line",
                failure.data,
                None,
            )
            return
        now = _iso(self.ctx.clock.now())
        rev_id = self.ctx.state.add_revision(
            argv=list(target.argv),
            hicache=dict(target.hicache),
            created_at=now,
            actor="kimi-ops (automatic rollback)",
            kind="rollback",
            rollback_of=failed_rev,
            operation_id=self.op_id,
        )
        self.ctx.state.update_operation(self.op_id, rollback_of=failed_rev)
        self._state = "rolling_back"
        self._cursor = {
            "stage": "rollback",
            "step": "stopping",
            "rev_id": rev_id,
            "argv": list(target.argv),
            "target": target.id,
            "cause": failure.data,
            "cause_message": failure.message,
        }
        self.ctx.state.update_operation(self.op_id, cursor=dict(self._cursor))
        self._progress = ProgressModel()
        self._t0 = None
        self.emit(
            "rolling_back",
            f"{failure.message}; rolling back to revision {target.id} "
            f"({read_hicache(list(target.argv)).effective_phrase()})",
            {"cause": failure.data, "target_revision": target.id, "revision": rev_id},
            step="rolling_back",
            progress=0.0,
            state="rolling_back",
        )
        self._after_rollback(self._attempt())

    def _after_rollback(self, outcome: Outcome) -> None:
        cause = dict(self._cursor.get("cause") or {})
        cause_message = str(self._cursor.get("cause_message", "the new config failed"))
        if outcome.ready:
            self._record(outcome, "ready")
            data = dict(outcome.data, cause=cause)
            self._finish(
                "rolled_back",
                f"rolled back: {outcome.message}. Cause: {cause_message}",
                data,
                1.0,
            )
            return
        self._record(outcome, "failed")
        self._finish(
            "failed",
            f"the rollback failed too ({outcome.message}); not retrying. "
            f"First failure: {cause_message}",
            dict(outcome.data, cause=cause),
            None,
        )

    # -- one start ----------------------------------------------------------------------------

    def _attempt(self) -> Outcome:
        ctx, cursor = self.ctx, self._cursor
        argv = list(cursor["argv"])
        ranks = read_topology(argv).local_ranks
        applied = read_hicache(argv)
        expected_gb = cursor.get("expected_gb")
        self._progress = ProgressModel(expected_gb)
        self._samples = ctx.state.startup_samples()
        step = cursor.get("step", "stopping")
        status = ctx.control.status()
        pid = cursor.get("pid")
        if step == "following" or (step == "starting" and status.running):
            # Crashed between start() and saving the pid: the server running is ours.
            if (pid is None or pid != status.main_pid) and step == "starting":
                self._save(step="following", pid=status.main_pid, t0=status.started_at)
        else:
            try:
                self._stop_wait_start(argv, ranks, step)
            except _NoStart as exc:
                message = f"not started: {str(exc).rstrip('.')}; the server is stopped"
                data = dict(exc.data, message=str(exc), no_start=True)
                return Outcome(False, message, data)
            status = ctx.control.status()
            self._save(step="following", pid=status.main_pid, t0=status.started_at)
        self._t0 = float(self._cursor.get("t0") or ctx.clock.now().timestamp())
        source = ctx.control.open_log(since=self._cursor.get("t0"))
        follower = StartFollower(
            ctx,
            self.emit,
            StartWatcher(
                self._progress,
                ranks,
                ratio=applied.effective().ratio,
                page_size=read_topology(argv).page_size or 1,
            ),
            applied,
            self._cursor.get("pid"),
            self._t0,
            lambda: self._state,
        )
        try:
            return follower.run(source)
        finally:
            source.close()

    def _stop_wait_start(self, argv: list[str], ranks: int, step: str) -> None:
        ctx = self.ctx
        if step == "stopping":
            if ctx.control.read_command() != argv:
                # Only a change is written: rewriting the same line (a restart, a resumed step)
                # would replace the kept previous version with the current one.
                ctx.control.write_command(argv)
            before = ctx.control.status()
            self.emit(
                "stopping",
                f"stopping the server (pid {before.main_pid})"
                if before.running
                else "the server is not running; nothing to stop",
                {"pid": before.main_pid},
                step="stopping",
            )
            stopped = ctx.control.stop(ctx.settings.stop_grace_s)
            self._save(step="waiting_gpus")
            self.emit(
                "waiting_gpus",
                f"stopped ({stopped.how}, {stopped.duration_s:.1f} s); waiting for the GPUs to "
                "free",
                {"how": stopped.how, "stop_s": round(stopped.duration_s, 2)},
                step="waiting_gpus",
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
            raise _NoStart(str(exc), {"kind": "gpu_busy", "processes": exc.processes}) from exc
        except KimiOpsError as exc:  # NVML failing ("GPU is lost"), the process table unreadable
            raise _NoStart(str(exc), {"kind": _kind_of(exc)}) from exc
        self._save(step="starting")
        self._t0 = ctx.clock.now().timestamp()
        note = f" ({waited.note})" if waited.note else ""
        self.emit(
            "starting",
            f"GPUs free after {waited.waited_s:.1f} s{note}; starting "
            f"{read_hicache(argv).effective_phrase()}",
            {"gpus_free_s": round(waited.waited_s, 2), "ranks": ranks},
            step="starting",
            progress=self._progress.at("starting"),
        )
        try:
            ctx.control.start()
        except KimiOpsError as exc:  # the backend refused: nothing runs, nothing to follow
            raise _NoStart(str(exc), {"kind": _kind_of(exc)}) from exc


def _kind_of(exc: KimiOpsError) -> str:
    """The failure kind recorded for an error that kept the server from starting."""
    if isinstance(exc, GpuProbeError):
        return "gpu_probe"
    if isinstance(exc, ProbeError):
        return "probe"
    if isinstance(exc, ServerControlError):
        return "backend"
    return "error"


class _NoStart(KimiOpsError):
    """The start could not begin (GPUs busy, the GPU probe or the backend failing): the
    operation fails without starting, the server left stopped."""

    def __init__(self, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.data = data
