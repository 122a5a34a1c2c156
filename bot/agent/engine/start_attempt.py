"""One start of a config, from its resume point to how it ended: check the server's port, stop
the server, wait for its GPUs, write the command line, spawn the new one (or adopt the one a
dead agent spawned), then follow its log under the guard until it is ready or has failed.

Each step is saved in the operation's :class:`~bot.agent.engine.position.OperationPosition`
before it acts, so a restarted agent picks the start up where it was: a start recorded as begun
is asked of the backend by its marker (``ServerControl.started``) and adopted, never spawned
twice.
"""

from __future__ import annotations

from typing import Any

from bot.agent.cmdline import read_hicache, read_topology
from bot.agent.engine.context import StartOutcome
from bot.agent.engine.crash_points import CrashPoint
from bot.agent.engine.event_log import EventLog
from bot.agent.engine.follower import StartFollower
from bot.agent.engine.gpu_wait import gpu_indices, wait_for_gpus_free
from bot.agent.engine.guard import PoolBudget, StartGuard
from bot.agent.engine.position import OperationPosition
from bot.agent.engine.watcher import StartWatcher
from bot.agent.state.resume_point import Stage, Step
from bot.errors import (
    GpuProbeError,
    GpusBusyError,
    KimiOpsError,
    ProbeError,
    ServerControlError,
)
from bot.vocab import EventPhase, FailureKind, OperationState

__all__ = ["StartAttempt"]

#: The operation's state while a start of each stage is under way (a stall ends back in it).
_ACTIVE_STATE = {Stage.APPLY: OperationState.RUNNING, Stage.ROLLBACK: OperationState.ROLLING_BACK}


class StartAttempt:
    """Starts the config at ``position``'s resume point and follows it to its end."""

    def __init__(self, position: OperationPosition, events: EventLog) -> None:
        self.ctx = position.ctx
        self.position = position
        self.events = events

    def run(self) -> StartOutcome:
        """Start (or adopt) and follow; raises Abandoned when the agent shuts down."""
        ctx, position = self.ctx, self.position
        argv = list(position.point.argv)
        topology = read_topology(argv)
        applied = read_hicache(argv)
        self.events.new_start(position.point.expected_gb)
        if position.point.step is Step.STARTING and (
            ctx.control.started(position.point.marker(position.op_id))
            or ctx.control.status().running
        ):
            # Recorded as begun and the backend has it (or a server runs, which after our stop
            # and GPU wait can only be ours): adopt it, never start a second one.
            self._adopt()
        elif position.point.step is not Step.FOLLOWING:
            refused = self._stop_wait_start(argv, topology.local_ranks)
            if refused is not None:
                return refused
            self._adopt()
        point = position.point
        t0 = point.t0 if point.t0 is not None else ctx.clock.now().timestamp()
        self.events.t0 = t0
        active_state = _ACTIVE_STATE[point.stage]
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
            lambda: active_state,
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
        view = self.ctx.state.operation(self.position.op_id)
        budget = PoolBudget.from_plan(
            None if view is None else view.plan,
            with_pools=self.position.point.stage is Stage.APPLY,
        )
        return StartGuard(settings, self.ctx.probe, budget, ranks)

    def _adopt(self) -> None:
        """Record the started server's pid and start time as the point to follow from."""
        position = self.position
        status = self.ctx.control.status()
        started_at = status.started_at if status.started_at is not None else position.point.t0
        position.save(position.point.at(Step.FOLLOWING, pid=status.main_pid, t0=started_at))
        position.crash_point(CrashPoint.FOLLOWING_RECORDED)

    def _stop_wait_start(self, argv: list[str], ranks: int) -> StartOutcome | None:
        """Stop, wait for the GPUs and start; a StartOutcome (not started) when that cannot be."""
        ctx, position = self.ctx, self.position
        if position.point.step is Step.STOPPING:
            conflict = ctx.control.port_conflict(*_address(argv))
            if conflict is not None:
                # Before anything stops: the new server would die binding it, after its whole
                # load, and so would a rollback's.
                return StartOutcome(
                    False,
                    f"not started: {conflict}; the server was left as it is. Free the port "
                    "(or stop what holds it), then try again",
                    {"kind": FailureKind.PORT_IN_USE.value, "message": conflict},
                    started=False,
                )
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
            position.crash_point(CrashPoint.STOP_SENT)
            position.save(position.point.at(Step.WAITING_GPUS))
            position.crash_point(CrashPoint.STOPPED_RECORDED)
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
                                      "processes": exc.processes}, self._where())  # fmt: skip
        except KimiOpsError as exc:  # NVML failing ("GPU is lost"), the process table unreadable
            return _not_started(exc, {"kind": _kind_of(exc).value}, self._where())
        position.crash_point(CrashPoint.GPUS_FREE)
        # The command is written only now, with the GPUs free and the start next: a start that
        # never happens (GPUs busy, the probe failing) leaves the config that last ran on disk.
        written_over = ctx.control.read_command()
        if written_over != argv:
            # Only a change is written: rewriting the same line (a restart, a resumed step)
            # would replace the kept previous version with the current one.
            ctx.control.write_command(argv)
            position.crash_point(CrashPoint.COMMAND_WRITTEN)
        now = ctx.clock.now().timestamp()
        starts = position.point.starts + (0 if position.point.step is Step.STARTING else 1)
        position.save(position.point.at(Step.STARTING, starts=starts, t0=now))
        position.crash_point(CrashPoint.START_RECORDED)
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
            ctx.control.start(position.point.marker(position.op_id))
        except KimiOpsError as exc:  # the backend refused: nothing runs, nothing to follow
            if written_over != argv:
                ctx.control.write_command(written_over)  # the config that last ran, again
            return _not_started(exc, {"kind": _kind_of(exc).value}, self._where())
        position.crash_point(CrashPoint.SPAWNED)
        return None

    def _where(self) -> str:
        """Where the server stands, said as it is (a server started by hand may run on)."""
        try:
            status = self.ctx.control.status()
        except KimiOpsError as exc:
            return f"the server's state is unknown ({exc})"
        if status.running:
            return f"a server is running (pid {status.main_pid})"
        return "the server is stopped"


def _address(argv: list[str]) -> tuple[str, int]:
    """The host and port the server binds (SGLang's defaults when not given)."""
    topology = read_topology(argv)
    return topology.host, topology.port


def _not_started(exc: KimiOpsError, data: dict[str, Any], where: str) -> StartOutcome:
    """The start could not begin (GPUs busy, the GPU probe or the backend failing): the
    operation fails without starting, saying where the server stands."""
    message = f"not started: {str(exc).rstrip('.')}; {where}"
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
