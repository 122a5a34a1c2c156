"""One operation, run in its own thread: stop, wait for the GPUs, start, follow, verify, and roll
back by itself when the new config does not come up.

Where it stands is saved in the operation's ``cursor`` before each step that acts on the server
(stage "apply" or "rollback"; step "stopping", "starting", "following"; the pid it started), so
a restarted agent resumes it: it re-attaches to the server it started (never starting it twice),
re-reads that start's log from its beginning and skips the steps already recorded as events.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bot.agent._progress import ProgressModel, eta_seconds
from bot.agent._verify import gpu_indices, local_ranks, reported_mismatch
from bot.agent._watch import Draft, StartWatcher
from bot.agent.cmdline import read_hicache
from bot.agent.config import AgentSettings
from bot.agent.control import LogSource, ServerControl
from bot.agent.gpu_wait import wait_for_gpus_free
from bot.agent.probe import HostProbe
from bot.agent.state import AgentState
from bot.clock import Clock
from bot.errors import GpusBusyError, KimiOpsError
from bot.planner import estimate_startup_seconds

__all__ = ["Abandoned", "Runner", "RunnerContext", "SGLangLike"]

log = logging.getLogger(__name__)

# How often the log is read while following: often enough that "ready" is seen promptly, rarely
# enough that following a busy log costs little (the parser skips batch lines in bulk).
_FOLLOW_S = 0.1
# After the process died, how long to keep reading for its last lines (journald lags a little).
_DRAIN_S = 0.5


class SGLangLike(Protocol):
    def health(self) -> int | None: ...

    def server_info(self) -> dict[str, Any] | None: ...


class Abandoned(Exception):
    """The agent is shutting down: stop watching, leave the operation to ``resume()``."""


@dataclass
class RunnerContext:
    settings: AgentSettings
    control: ServerControl
    probe: HostProbe
    sglang: SGLangLike
    state: AgentState
    clock: Clock
    health_grace_s: float
    stop: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Outcome:
    ready: bool
    message: str
    data: dict[str, Any]


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
        self._stalled = False
        self._state = "running"
        self._progress = ProgressModel()
        self._cursor: dict[str, Any] = {}
        self._t0: float | None = None  # Unix time the current start began
        self._expected_s: float | None = None

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
                return
            self._steps.add(key)
            payload["step"] = key
        if self._t0 is not None:
            elapsed = max(0.0, self.ctx.clock.now().timestamp() - self._t0)
            payload.setdefault("elapsed_s", round(elapsed, 1))
            eta = eta_seconds(elapsed, self._progress.last, self._expected_s)
            if eta is not None:
                payload.setdefault("eta_s", eta)
        if state is None and self._stalled:
            state = self._state
        if state is not None:
            self._stalled = state == "stalled"
        self.ctx.state.append_event(
            self.op_id,
            at=_iso(self.ctx.clock.now()),
            phase=phase,
            message=message,
            progress=self._progress.last if progress is None else progress,
            data=payload,
            state=state,
        )

    def _draft(self, draft: Draft) -> None:
        self.emit(draft.phase, draft.message, draft.data, step=draft.step, progress=draft.progress)

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
            self._finish("failed", f"the agent failed: {exc}", {"error": str(exc)}, None)

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
        self._rollback(outcome)

    @property
    def _stage(self) -> str:
        return str(self._cursor.get("stage", "apply"))

    def _finish(
        self, state: str, message: str, data: dict[str, Any], progress: float | None
    ) -> None:
        self.emit(state, message, data, progress=progress, state=state)
        self.ctx.state.update_operation(
            self.op_id, state=state, outcome=message, finished_at=_iso(self.ctx.clock.now())
        )

    def _record(self, outcome: _Outcome, result: str) -> None:
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

    def _rollback(self, failure: _Outcome) -> None:
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

    def _after_rollback(self, outcome: _Outcome) -> None:
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

    def _attempt(self) -> _Outcome:
        ctx, cursor = self.ctx, self._cursor
        argv = list(cursor["argv"])
        ranks = local_ranks(argv)
        applied = read_hicache(argv)
        expected_gb = cursor.get("expected_gb")
        self._progress = ProgressModel(expected_gb)
        self._expected_s = estimate_startup_seconds(
            ctx.state.startup_samples(), float(expected_gb or 0.0)
        )
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
                return _Outcome(False, f"not started: {exc}", dict(exc.data, no_start=True))
            status = ctx.control.status()
            self._save(step="following", pid=status.main_pid, t0=status.started_at)
        self._t0 = float(self._cursor.get("t0") or ctx.clock.now().timestamp())
        source = ctx.control.open_log(since=self._cursor.get("t0"))
        try:
            return self._follow(source, StartWatcher(self._progress, ranks), applied)
        finally:
            source.close()

    def _stop_wait_start(self, argv: list[str], ranks: int, step: str) -> None:
        ctx = self.ctx
        if step == "stopping":
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
        ctx.control.start()

    def _follow(self, source: LogSource, watcher: StartWatcher, applied: Any) -> _Outcome:
        ctx = self.ctx
        settings = ctx.settings
        clock = ctx.clock
        poll = settings.poll_interval_s
        pid = self._cursor.get("pid")
        last_move = clock.monotonic()
        next_status = next_health = 0.0
        bad_since: float | None = None
        verifying = False
        saw_ready_line = False
        while True:
            if ctx.stop.is_set():
                raise Abandoned
            now = clock.monotonic()
            for draft in watcher.feed(source.read_new(), now) + watcher.tick(now):
                self._draft(draft)
                if draft.from_log:
                    last_move = now
            if now >= next_status:
                next_status = now + poll
                status = ctx.control.status()
                if not status.running or (pid is not None and status.main_pid != pid):
                    return self._died(source, watcher, status.exit_status)
            figures = watcher.figures
            if figures.log_ready and not saw_ready_line:
                saw_ready_line = True
                next_health = now  # the server says it is ready: check at once, not next poll
            if (figures.http_up or figures.log_ready) and now >= next_health:
                next_health = now + poll
                code = ctx.sglang.health()
                if code == 200:
                    bad_since = None
                    if not verifying:
                        verifying = True
                        self.emit(
                            "verifying",
                            "health 200; checking /server_info reports the applied setting",
                            step="verifying",
                            progress=self._progress.at("verifying"),
                        )
                        last_move = now
                    info = ctx.sglang.server_info()
                    if info is not None:
                        mismatch = reported_mismatch(info, applied)
                        if mismatch is None:
                            return self._ready(watcher, info, applied)
                        return self._failed(watcher, "config_mismatch", mismatch, [])
                else:
                    bad_since = now if bad_since is None else bad_since
                    if now - bad_since > ctx.health_grace_s:
                        return self._failed(
                            watcher,
                            watcher.figures.failure_kind or "unknown",
                            f"/health answered {code} for {now - bad_since:.0f} s after HTTP "
                            "came up",
                            list(watcher.figures.failure_lines),
                        )
            allowance = settings.stall_after_s
            if figures.phase == "host_pool":
                allowance += self._progress.pin_seconds  # the pin is silent by nature
            if not self._stalled and now - last_move > allowance:
                self._stalled = True
                self.emit(
                    "stalled",
                    f"no progress for {now - last_move:.0f} s in {figures.phase} while the "
                    "server process lives; still watching",
                    {"silent_s": round(now - last_move, 1), "in_phase": figures.phase},
                    state="stalled",
                )
            if clock.now().timestamp() - (self._t0 or 0.0) > settings.hard_ceiling_s:
                return self._failed(
                    watcher,
                    "timeout",
                    f"not ready after the hard ceiling of {settings.hard_ceiling_s:.0f} s",
                    list(figures.failure_lines),
                )
            clock.sleep(min(_FOLLOW_S, poll))

    def _died(self, source: LogSource, watcher: StartWatcher, exit_status: int | None) -> _Outcome:
        clock = self.ctx.clock
        deadline = clock.monotonic() + _DRAIN_S
        while clock.monotonic() < deadline:
            text = source.read_new()
            for draft in watcher.feed(text, clock.monotonic()):
                self._draft(draft)
            if not text:
                clock.sleep(0.05)
        for draft in watcher.close(clock.monotonic()):
            self._draft(draft)
        figures = watcher.figures
        kind = figures.failure_kind or "unknown"
        return self._failed(
            watcher,
            kind,
            f"the server died in {figures.phase} (exit status {exit_status}): {kind}",
            list(figures.failure_lines),
            exit_status,
        )

    def _failed(
        self,
        watcher: StartWatcher,
        kind: str,
        message: str,
        lines: list[str],
        exit_status: int | None = None,
    ) -> _Outcome:
        data = {"kind": kind, "lines": lines, "exit_status": exit_status,
                "phase": watcher.figures.phase}  # fmt: skip
        data.update(self._figures(watcher, None))
        return _Outcome(False, message, data)

    def _figures(self, watcher: StartWatcher, info: dict[str, Any] | None) -> dict[str, Any]:
        figures = watcher.figures
        device_tokens = figures.device_tokens
        if device_tokens is None and info is not None:
            raw = info.get("max_total_num_tokens")
            device_tokens = int(raw) if isinstance(raw, int | float) else None
        return {
            "device_tokens": device_tokens,
            "kv_gib_per_rank": figures.kv_gib_per_rank,
            "kv_bytes_per_token": figures.kv_bytes_per_token,
            "host_gb_per_rank": figures.host_gb_per_rank,
            "host_tokens_per_rank": figures.host_tokens(),
            "ranks": watcher.ranks,
        }

    def _ready(self, watcher: StartWatcher, info: dict[str, Any], applied: Any) -> _Outcome:
        data = self._figures(watcher, info)
        startup_s = max(0.0, self.ctx.clock.now().timestamp() - (self._t0 or 0.0))
        data["startup_s"] = round(startup_s, 2)
        data["version"] = info.get("version")
        parts = [f"ready with {applied.effective_phrase()}"]
        if data["device_tokens"] is not None:
            parts.append(f"{data['device_tokens']:,} device tokens")
        gb = data["host_gb_per_rank"]
        if gb is not None:
            tokens = data["host_tokens_per_rank"]
            token_text = f" ({tokens:,} tokens)" if tokens is not None else ""
            parts.append(
                f"host {gb:.2f} GB/rank{token_text} x {watcher.ranks} = {gb * watcher.ranks:.1f} GB"
            )
        parts.append(f"started in {startup_s:.0f} s")
        return _Outcome(True, "; ".join(parts), data)


class _NoStart(KimiOpsError):
    """The start could not begin (GPUs busy): the operation fails without starting."""

    def __init__(self, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.data = data
