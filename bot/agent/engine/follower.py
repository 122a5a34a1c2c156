"""Following one start to its end: ready (health 200 and the applied setting served) or failed.

The loop reads the server's log as it grows, turns it into events, watches the process, polls
``/health`` from the start (independent of the log, which can be moved away: readiness is the
server's own answer), and reports a stall (no progress from the log while the process
lives) without giving up; only the process dying, health failing for the grace time after HTTP
came up, the served setting differing from the applied one, or the hard ceiling end it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from bot.agent.cmdline import HiCacheSetting
from bot.agent.control.protocol import LogSource
from bot.agent.engine.context import Abandoned, Emit, RunnerContext, StartOutcome
from bot.agent.engine.guard import GuardTrip, StartGuard
from bot.agent.engine.notices import NoticeKey
from bot.agent.engine.progress import ProgressModel
from bot.agent.engine.served_setting import reported_mismatch
from bot.agent.engine.watcher import Draft, StartWatcher
from bot.agent.rlimits import out_of_descriptors
from bot.errors import KimiOpsError
from bot.log_throttle import LogThrottle
from bot.vocab import EventPhase, FailureKind, OperationState

__all__ = ["DRAIN_S", "FOLLOW_S", "LAG_S", "StartFollower"]

# How often the log is read while following: often enough that "ready" is seen promptly, rarely
# enough that following a busy log costs little (the parser skips batch lines in bulk).
FOLLOW_S = 0.1
# After the process died, or once /health answers 200, how long to keep reading for the lines
# the server already wrote (journald lags a little).
DRAIN_S = 0.5
# /health answered 200 before the log showed HTTP up: how long the log may lag behind it.
LAG_S = 5.0


_T = TypeVar("_T")
log = logging.getLogger(__name__)


def _unless_out_of_fds(call: Callable[[], _T], what: str, throttle: LogThrottle) -> _T | None:
    """``call()``, or None when it failed for want of file descriptors (logged at most once a
    minute): running out of them is the agent's trouble, never a reason to fail the start."""
    try:
        return call()
    except KimiOpsError as exc:
        if not out_of_descriptors(exc):
            raise
        throttle.warning(
            what, "could not %s: %s; the agent is out of file descriptors, retrying", what, exc
        )
        return None


class StartFollower:
    """Follows the start of the server ``pid`` (begun at Unix time ``t0``) through ``emit``."""

    def __init__(
        self,
        ctx: RunnerContext,
        emit: Emit,
        watcher: StartWatcher,
        applied: HiCacheSetting,
        pid: int | None,
        t0: float,
        active_state: Callable[[], OperationState],
        guard: StartGuard | None = None,
    ) -> None:
        self.ctx = ctx
        self.guard = guard
        self.emit = emit
        self.watcher = watcher
        self.progress: ProgressModel = watcher.progress
        self.applied = applied
        self.pid = pid
        self.t0 = t0
        self._active_state = active_state
        self._stalled = False
        self._problem: str | None = None
        self._fd_warnings = LogThrottle(log)

    def _draft(self, draft: Draft) -> None:
        if draft.from_log:
            self._moving(draft.phase, draft.message, draft.data, draft.step, draft.progress)
        else:  # an estimate (the pin) is not the log moving: a stall stays a stall
            self.emit(draft.phase, draft.message, draft.data, step=draft.step,
                      progress=draft.progress)  # fmt: skip

    def _moving(
        self,
        phase: EventPhase,
        message: str,
        data: dict[str, Any] | None,
        step: str,
        progress: float,
    ) -> None:
        """Emit progress; after a stall it also puts the operation back to its active state."""
        state = None
        if self._stalled:
            state, self._stalled = self._active_state(), False
        self.emit(phase, message, data, step=step, progress=progress, state=state)

    def _log_problem(self, problem: str | None) -> None:
        """A log that cannot be followed by its name is shown in status while it lasts and
        told once in the operation's events; the start goes on, followed from the endpoints."""
        if problem == self._problem:
            return
        self._problem = problem
        self.ctx.notices.set(NoticeKey.LOG, problem)
        if problem is not None:
            self.emit(
                self.watcher.figures.phase,
                problem,
                {"log_problem": problem},
                step="log:problem",
            )

    def run(self, source: LogSource) -> StartOutcome:
        """Follow until the start ends; raises Abandoned when the agent shuts down."""
        try:
            return self._follow(source)
        finally:
            self._log_problem(None)

    def _follow(self, source: LogSource) -> StartOutcome:
        ctx, watcher = self.ctx, self.watcher
        settings, clock = ctx.settings, ctx.clock
        poll = settings.poll_interval_s
        last_move = clock.monotonic()
        next_status = next_health = 0.0
        bad_since: float | None = None
        verifying = saw_ready_line = False
        while True:
            if ctx.stop.is_set():
                raise Abandoned
            now = clock.monotonic()
            for draft in watcher.feed(self._read(source), now) + watcher.tick(now):
                self._draft(draft)
                if draft.from_log:
                    last_move = now
            self._log_problem(source.problem())
            if self.guard is not None:
                trip = self.guard.check(watcher.figures, now)
                if trip is not None:
                    return self._tripped(trip)
            if now >= next_status:
                next_status = now + poll
                status = _unless_out_of_fds(
                    ctx.control.status, "read the server's status", self._fd_warnings
                )
                if status is None:
                    pass  # no descriptor to read it with: asked again next poll
                elif not status.running or (self.pid is not None and status.main_pid != self.pid):
                    return self._died(source, status.exit_status)
            figures = watcher.figures
            if figures.log_ready and not saw_ready_line:
                saw_ready_line = True
                next_health = now  # the server says it is ready: check at once, not next poll
            # /health from the start, not only once the log shows HTTP up: a log moved away
            # (or a journal that lags) must not keep a ready server from being seen as such.
            if now >= next_health:
                next_health = now + poll
                code = ctx.sglang.health()
                if code == 200:
                    bad_since = None
                    if not verifying:
                        self._catch_up(source)
                        verifying = True
                        last_move = now
                        self._moving(
                            EventPhase.VERIFYING,
                            "health 200; checking /server_info reports the applied setting",
                            None,
                            EventPhase.VERIFYING.value,
                            self.progress.at(EventPhase.VERIFYING),
                        )
                    info = ctx.sglang.server_info()
                    if info is not None:
                        mismatch = reported_mismatch(info, self.applied)
                        if mismatch is None:
                            return self._ready(info)
                        return self._failed(FailureKind.CONFIG_MISMATCH, mismatch, [])
                elif figures.http_up or figures.log_ready:  # no answer before HTTP: starting
                    bad_since = now if bad_since is None else bad_since
                    if now - bad_since > ctx.health_grace_s:
                        return self._failed(
                            figures.failure_kind or FailureKind.UNKNOWN,
                            (
                                f"/health answered {code}"
                                if code is not None
                                else "/health did not answer"
                            )
                            + f" for {now - bad_since:.0f} s after HTTP came up",
                            list(figures.failure_lines),
                        )
            allowance = settings.stall_after_s
            if figures.phase == EventPhase.HOST_POOL:
                allowance += self.progress.pin_seconds  # the pin is silent by nature
            if not self._stalled and now - last_move > allowance:
                self._stalled = True
                self.emit(
                    EventPhase.STALLED,
                    f"no progress for {now - last_move:.0f} s in {figures.phase} while the "
                    "server process lives; still watching",
                    {"silent_s": round(now - last_move, 1), "in_phase": figures.phase},
                    state=OperationState.STALLED,
                )
            if clock.now().timestamp() - self.t0 > settings.hard_ceiling_s:
                return self._failed(
                    FailureKind.TIMEOUT,
                    f"not ready after the hard ceiling of {settings.hard_ceiling_s:.0f} s",
                    list(figures.failure_lines),
                )
            clock.sleep(min(FOLLOW_S, poll))

    def _catch_up(self, source: LogSource) -> None:
        """/health answers 200 only after the server logged its warmup and (just after) its
        ready line, but a journal can deliver them later than HTTP answers: read on until the
        ready line, so no phase is missing or reported after "verifying". At most DRAIN_S once
        the log showed HTTP up; LAG_S when it did not yet (a lagging journal), none when the
        log cannot be followed (moved away: the endpoints are all there is)."""
        if source.problem() is not None:
            return
        wait_s = DRAIN_S if self.watcher.figures.http_up else LAG_S
        self._drain(source, until=lambda: self.watcher.figures.log_ready, wait_s=wait_s)

    def _drain(self, source: LogSource, until: Callable[[], bool], wait_s: float = DRAIN_S) -> None:
        """Read what the log still delivers for at most ``wait_s``, or until ``until()``."""
        clock, watcher = self.ctx.clock, self.watcher
        deadline = clock.monotonic() + wait_s
        while not until() and clock.monotonic() < deadline:
            text = self._read(source)
            for draft in watcher.feed(text, clock.monotonic()):
                self._draft(draft)
            if not text:
                clock.sleep(0.05)

    def _read(self, source: LogSource) -> str:
        """What the log added since the last read; nothing while the agent is out of file
        descriptors (said in its log, and read again at the next turn: nothing is lost)."""
        return _unless_out_of_fds(source.read_new, "read the server's log", self._fd_warnings) or ""

    def _died(self, source: LogSource, exit_status: int | None) -> StartOutcome:
        """The process is gone: read its last lines, then classify from what the log said."""
        clock, watcher = self.ctx.clock, self.watcher
        self._drain(source, until=lambda: False)
        for draft in watcher.close(clock.monotonic()):
            self._draft(draft)
        figures = watcher.figures
        kind = figures.failure_kind or FailureKind.UNKNOWN
        return self._failed(
            kind,
            f"the server died in {figures.phase} (exit status {exit_status}): {kind}",
            list(figures.failure_lines),
            exit_status,
        )

    def _tripped(self, trip: GuardTrip) -> StartOutcome:
        """The guard stops the start: SIGKILL the whole tree at once (SIGTERM would let the
        ranks go on pinning through the grace time), then fail with the guard's figures."""
        stopped = self.ctx.control.kill()
        outcome = self._failed(trip.kind, trip.message, list(trip.lines), stopped.exit_status)
        outcome.data.update(trip.data, kill_s=round(stopped.duration_s, 2))
        return outcome

    def _failed(
        self, kind: FailureKind, message: str, lines: list[str], exit_status: int | None = None
    ) -> StartOutcome:
        data: dict[str, Any] = {"kind": kind.value, "lines": lines, "exit_status": exit_status,
                                "phase": self.watcher.figures.phase}  # fmt: skip
        data.update(self.figures(None))
        return StartOutcome(False, message, data)

    def figures(self, info: dict[str, Any] | None) -> dict[str, Any]:
        """The start's capacity figures from the log (device tokens from /server_info if the
        log did not show them)."""
        figures = self.watcher.figures
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
            "ranks": self.watcher.ranks,
            "draft_kv_gib": figures.draft_kv_gib,
            "host_extra_gb_per_rank": dict(figures.host_extra_gb),
            "host_total_gb_per_rank": figures.host_total_gb_per_rank,
            "hicache_auto_ratio": figures.auto_ratio,
        }

    def _ready(self, info: dict[str, Any]) -> StartOutcome:
        data = self.figures(info)
        startup_s = max(0.0, self.ctx.clock.now().timestamp() - self.t0)
        data["startup_s"] = round(startup_s, 2)
        data["version"] = info.get("version")
        ranks = self.watcher.ranks
        parts = [f"ready with {self.applied.effective_phrase()}"]
        if data["device_tokens"] is not None:
            parts.append(f"{data['device_tokens']:,} device tokens")
        gb = data["host_gb_per_rank"]
        if gb is not None:
            tokens = data["host_tokens_per_rank"]
            token_text = f" ({tokens:,} tokens)" if tokens is not None else ""
            extras = "".join(
                f" + {extra:.2f} GB/rank {name}"
                for name, extra in data["host_extra_gb_per_rank"].items()
            )
            total = data["host_total_gb_per_rank"] or gb
            parts.append(
                f"host {gb:.2f} GB/rank{token_text}{extras} x {ranks} = {total * ranks:.1f} GB"
            )
        if data["hicache_auto_ratio"] is not None:
            parts.append(f"SGLang auto-sized HiCache to ratio {data['hicache_auto_ratio']:.3f}")
        parts.append(f"started in {startup_s:.0f} s")
        return StartOutcome(True, "; ".join(parts), data)
