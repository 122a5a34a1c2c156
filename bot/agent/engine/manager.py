"""Operations on the server: resize, restart and rollback, one at a time, each in its own thread.

``submit`` does everything that can refuse a request before anything is touched (re-plan on fresh
facts, the proposal's fingerprint, a running operation, the target command line's validity),
records the operation and its revision, and hands the work to a background thread (the agent's
one concurrency model: threads; the HTTP layer only reads). Progress is an ordered, gap-free,
persisted event list that clients long-poll with ``wait_events``::

    manager.submit(OperationKind.RESIZE, actor="U024BE7LH", ratio=4, fingerprint="3f1c0a9e5d7b2c41")
    -> OperationView(id=7, kind=OperationKind.RESIZE, state=OperationState.RUNNING, ...)
    manager.wait_events(7, after=0, wait_s=30)
    -> (OperationView(...), [ProgressEvent(seq=1, phase=EventPhase.PLANNED, ...), ...])
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from bot.agent.cmdline import (
    HiCacheSetting,
    read_hicache,
    read_topology,
    rewrite_hicache,
    validate_command,
)
from bot.agent.config import AgentSettings, command_drift
from bot.agent.control.protocol import ServerControl
from bot.agent.engine.context import RunnerContext, SGLangLike
from bot.agent.engine.crash_points import NO_CRASHES, CrashPoints
from bot.agent.engine.live_change import LiveChanges, LiveRunner
from bot.agent.engine.runner import Runner
from bot.agent.host.probe import HostProbe
from bot.agent.state.agent_state import AgentState
from bot.agent.state.resume_point import Stage
from bot.agent.state.views import OperationView, ProgressEvent, RevisionOutcome, RevisionView
from bot.clock import Clock
from bot.errors import (
    CommandLineError,
    InputError,
    KimiOpsError,
    NotFound,
    OperationConflict,
    PlanRefused,
    StaleProposal,
)
from bot.planner import ChangeRequest, LiveChange, Plan
from bot.vocab import EventPhase, OperationKind, OperationState

__all__ = ["OperationManager", "Planner"]

log = logging.getLogger(__name__)

Planner = Callable[[ChangeRequest], tuple[Plan, str]]
#: Below this much free space on the state directory's disk, status says it is full: an
#: operation's records (its events, resume points) are a few KiB each.
_STATE_ROOM_BYTES = 1024 * 1024
_MAX_ACTOR = 200


class OperationManager:
    """Runs the server's operations; one per server at a time (see the module docstring).

    ``health_grace_s``: how long ``/health`` may keep failing after HTTP came up before the start
    counts as failed (default: ``settings.health_grace_s``). ``crash_points``: the hook a crash
    test passes (see ``bot.agent.engine.crash_points``); none in production.
    """

    def __init__(
        self,
        settings: AgentSettings,
        control: ServerControl,
        probe: HostProbe,
        sglang: SGLangLike,
        state: AgentState,
        clock: Clock,
        planner: Planner,
        *,
        health_grace_s: float | None = None,
        crash_points: CrashPoints = NO_CRASHES,
        live: Callable[[RunnerContext], LiveChanges] | None = None,
    ) -> None:
        self.settings = settings
        self.control = control
        self.state = state
        self.clock = clock
        self.planner = planner
        self._ctx = RunnerContext(
            settings=settings,
            control=control,
            probe=probe,
            sglang=sglang,
            state=state,
            clock=clock,
            health_grace_s=settings.health_grace_s if health_grace_s is None else health_grace_s,
            crash_points=crash_points,
        )
        self._lock = threading.Lock()
        self._threads: dict[int, threading.Thread] = {}
        #: HiCache's runtime API (bot.agent.engine.live_change); None: every change restarts.
        self.live = None if live is None else live(self._ctx)

    # -- requests -----------------------------------------------------------------------------

    def submit(
        self,
        kind: OperationKind | str,
        actor: str,
        ratio: float | None = None,
        size_gb: float | None = None,
        revision: int | None = None,
        fingerprint: str | None = None,
        caller: str | None = None,
        auto: bool = False,
    ) -> OperationView:
        """Start an operation, or raise (nothing changed) InputError, OperationConflict,
        NotFound, StaleProposal or PlanRefused. ``caller`` names the token that asked.
        ``auto`` is a resize to neither flag: SGLang 0.5.23 sizes the pool at start."""
        kind = _check_input(kind, actor, ratio, size_gb, revision, auto)
        if kind in (OperationKind.LIVE, OperationKind.RECONFIGURE):
            raise InputError(f"a {kind} change goes to POST /v1/live/operations with its change")
        with self._lock:
            running = self.state.unfinished_operations()
            if running:
                held = running[0]
                thread = self._threads.get(held.id)
                if thread is not None and not thread.is_alive():
                    # Its thread ended without settling it: resume it, as a restarted agent
                    # would, so no operation stays running with nobody behind it.
                    log.warning("operation %s had no thread behind it: resuming it", held.id)
                    self._spawn(held.id)
                raise OperationConflict(
                    f"operation {held.id} ({held.kind}) by {held.actor} has been running since "
                    f"{held.created_at}; wait for it to finish",
                    holder=held.actor,
                    since=held.created_at,
                )
            current_argv = self.control.read_command()
            current_rev = self._recorded_revision(current_argv)
            target_argv: list[str] | None = None
            rollback_of: int | None = None
            if kind is OperationKind.RESIZE:
                size = int(size_gb) if size_gb is not None and size_gb == int(size_gb) else None
                setting = HiCacheSetting(enabled=True, ratio=None if size else ratio, size_gb=size)
                # auto: neither flag (the check refused auto beside a ratio or a size)
            else:
                target_argv, setting, rollback_of = self._target(
                    kind, current_argv, current_rev, revision
                )
            plan, fresh = self._plan(kind, setting, ratio, size_gb, auto)
            # A refusal first: what does not fit (or SGLang would reject) is refused whatever
            # the proposal it came from.
            if plan is not None and not plan.fits:
                raise PlanRefused(f"refused: {plan.reason}", plan=plan)
            if fingerprint is not None and fresh is not None and fingerprint != fresh:
                raise StaleProposal(
                    f"the proposal was made on facts {fingerprint!r}, but they are now {fresh!r} "
                    "(the server restarted or its config changed): plan again"
                )
            try:
                if target_argv is None:
                    target_argv = rewrite_hicache(current_argv, setting)
                validate_command(target_argv)
            except CommandLineError as exc:
                raise InputError(f"the new command line is not valid: {exc}") from exc
            # Only now, with every check passed, does the request write anything.
            if current_rev is None:
                current_rev = self._record_observed(current_argv)
            if kind is OperationKind.ROLLBACK:
                rollback_of = current_rev.id
                target_rev = revision if revision is not None else self._target_id(target_argv)
                if self.live is not None and target_rev is not None:
                    live_id = self.live.record_rollback(target_argv, target_rev, actor, caller)
                    if live_id is not None:
                        self._spawn(live_id)
                        return self.get(live_id)
            return self._create(
                kind,
                actor,
                ratio,
                size_gb,
                revision,
                plan,
                target_argv,
                setting,
                rollback_of,
                caller=caller,
            )

    def submit_live(
        self, change: LiveChange, actor: str, caller: str | None = None
    ) -> OperationView:
        """Start ``change`` live (bot.agent.engine.live_change) or, where SGLang's runtime API
        cannot make it, as a reconfigure: its flags written, then a restart. Raises (nothing
        changed) InputError when it is refused, or OperationConflict."""
        _check_input(OperationKind.LIVE, actor, None, None, None)
        if self.live is None:
            raise InputError("this agent holds no admin key: every change restarts the server")
        with self._lock:
            running = self.state.unfinished_operations()
            if running:
                held = running[0]
                raise OperationConflict(
                    f"operation {held.id} ({held.kind}) by {held.actor} has been running since "
                    f"{held.created_at}; wait for it to finish",
                    holder=held.actor,
                    since=held.created_at,
                )
            decision = self.live.decision(change)  # a refusal before any write
            target: list[str] | None = None
            if not decision.live:
                target = self.live.restart_command(change)
                try:
                    validate_command(target)
                except CommandLineError as exc:
                    raise InputError(f"the new command line is not valid: {exc}") from exc
            if self._recorded_revision(self.control.read_command()) is None:
                self._record_observed(self.control.read_command())
            if target is not None:
                setting = read_hicache(target)
                request = f"{change.phrase()}, with a restart"
                return self._create(
                    OperationKind.RECONFIGURE, actor, None, None, None, None, target, setting,
                    None, caller=caller, note=f"{request}: {decision.reason}",
                )  # fmt: skip
            op_id = self.live.record(change, decision, actor, caller)
            self._spawn(op_id)
            return self.get(op_id)

    def _target_id(self, argv: list[str]) -> int | None:
        for view in self.state.revisions():
            if list(view.argv) == argv:
                return view.id
        return None

    def _recorded_revision(self, argv: list[str]) -> RevisionView | None:
        """The revision the server runs now, if the agent has recorded it."""
        revisions = self.state.revisions()
        if revisions and list(revisions[0].argv) == argv:
            return revisions[0]
        return None

    def _record_observed(self, argv: list[str]) -> RevisionView:
        """The first time (or after an edit outside the agent) the running config is recorded
        as "observed", ready if the server answers 200 now, so a failed start can return to it."""
        healthy = self._ctx.sglang.health() == 200
        info = self._ctx.sglang.server_info() if healthy else None
        tokens = info.get("max_total_num_tokens") if info else None
        now = self.clock.now().isoformat(timespec="milliseconds")
        rev_id = self.state.add_revision(
            argv=argv,
            hicache=asdict(read_hicache(argv)),
            created_at=now,
            actor="kimi-ops (found running)",
            kind="observed",
            outcome=RevisionOutcome.READY if healthy else RevisionOutcome.UNKNOWN,
            became_ready=healthy,
            device_tokens=int(tokens) if isinstance(tokens, int | float) else None,
        )
        found = self.state.revision(rev_id)
        assert found is not None
        return found

    def _target(
        self,
        kind: OperationKind,
        current_argv: list[str],
        current: RevisionView | None,
        revision: int | None,
    ) -> tuple[list[str], HiCacheSetting, int | None]:
        if kind is OperationKind.RESTART:
            return current_argv, read_hicache(current_argv), None
        if revision is not None:
            target = self.state.revision(revision)
            if target is None:
                raise NotFound(f"no revision {revision}; GET /v1/revisions lists them")
        else:
            target = self.state.rollback_target(
                None if current is None else current.id, current_argv
            )
            if target is None:
                raise NotFound(
                    "no earlier revision became ready to roll back to; name one with revision"
                )
        # rollback_of is the current revision, recorded once every check has passed.
        return list(target.argv), read_hicache(list(target.argv)), None

    def _plan(
        self,
        kind: OperationKind,
        setting: HiCacheSetting,
        ratio: float | None,
        size_gb: float | None,
        auto: bool = False,
    ) -> tuple[Plan | None, str | None]:
        if kind is OperationKind.RESIZE:
            request = ChangeRequest(ratio=ratio, size_gb=size_gb, auto=auto)
        else:
            effective = setting.effective()
            if not effective.enabled:
                return None, None  # no host pool: nothing to budget
            request = ChangeRequest(ratio=effective.ratio, size_gb=effective.size_gb)
            if setting.ratio is None and setting.size_gb is None:
                request = ChangeRequest(auto=True)  # neither flag: SGLang sizes it (0.5.23)
        plan, fresh = self.planner(request)
        return plan, fresh

    def _create(
        self,
        kind: OperationKind,
        actor: str,
        ratio: float | None,
        size_gb: float | None,
        revision: int | None,
        plan: Plan | None,
        argv: list[str],
        setting: HiCacheSetting,
        rollback_of: int | None,
        caller: str | None = None,
        note: str | None = None,
    ) -> OperationView:
        now = self.clock.now().isoformat(timespec="milliseconds")
        request = {"kind": kind.value, "ratio": ratio, "size_gb": size_gb, "revision": revision}
        phrase = setting.effective_phrase()
        message = f"{kind} to {phrase} by {actor}" if note is None else f"{note} ({actor})"
        if plan is not None:
            message += f": {plan.reason}"
        data: dict[str, Any] = {
            "setting": phrase,
            "ranks": read_topology(argv).local_ranks,
            "expected_startup_s": None if plan is None else plan.expected_startup_s,
            "step": f"{Stage.APPLY.value}:{EventPhase.PLANNED.value}",
        }
        # One transaction: an agent killed here, or a disk that refuses the write, leaves no
        # operation without the resume point it would need.
        op_id, _ = self.state.record_operation(
            kind=kind,
            actor=actor,
            created_at=now,
            request=request,
            plan=None if plan is None else plan.to_dict(),
            argv=argv,
            hicache=asdict(read_hicache(argv)),  # as written, write policy and all
            rollback_of=rollback_of,
            caller=caller,
            expected_gb=None if plan is None else plan.per_rank_gb,
            message=message,
            data=data,
        )
        self._spawn(op_id)
        return self.get(op_id)

    def _spawn(self, op_id: int) -> None:
        view = self.state.operation(op_id)
        runner: Runner | LiveRunner = Runner(self._ctx, op_id)
        if view is not None and view.kind is OperationKind.LIVE:
            if self.live is None:  # never restart the server for a live change
                self.state.update_operation(op_id, state=OperationState.FAILED)
                return
            runner = self.live.runner(op_id)
        thread = threading.Thread(target=runner.run, name=f"kimi-op-{op_id}", daemon=True)
        self._threads[op_id] = thread
        thread.start()

    # -- reads --------------------------------------------------------------------------------

    def get(self, op_id: int) -> OperationView:
        view = self.state.operation(op_id)
        if view is None:
            raise NotFound(f"no operation {op_id}; GET /v1/operations lists recent ones")
        return view

    def wait_events(
        self, op_id: int, after: int, wait_s: float
    ) -> tuple[OperationView, list[ProgressEvent]]:
        """Events with ``seq > after``: at once if there are any, else as soon as one is
        recorded, else empty after ``wait_s``."""
        self.get(op_id)  # NotFound before waiting
        deadline = self.clock.monotonic() + max(0.0, wait_s)
        while True:
            # The operation before its events: a final state is committed with its final event,
            # so a page showing the end also holds it. Read the other way round, the end could
            # commit between the two reads and a follower stop one event short.
            view = self.get(op_id)
            events = self.state.events(op_id, after)
            remaining = deadline - self.clock.monotonic()
            if events or remaining <= 0 or self._ctx.stop.is_set():
                return view, events
            # Bounded wake-ups: an event written by another agent process wakes nobody here.
            self.state.wait_changed(min(remaining, 0.5))

    def problems(self) -> tuple[str, ...]:
        """What the engine finds wrong now, for status (``bot.agent.engine.notices``), and an
        edited ``[agent] command`` not adopted yet."""
        found = [self.command_drift(), self._server_outside(), self._disk_full()]
        return self._ctx.notices.lines() + tuple(line for line in found if line is not None)

    def _disk_full(self) -> str | None:
        """The state directory's disk without room for an operation's records."""
        try:
            free = shutil.disk_usage(self.settings.state_dir).free
        except OSError:
            return None
        if free >= _STATE_ROOM_BYTES:
            return None
        line = (
            f"the disk of the agent state {self.settings.state_dir} is full ({free // 1024} KiB "
            "free): a new operation cannot be recorded and is refused; free space there"
        )
        try:
            same = (
                os.stat(self.settings.log_file.parent).st_dev
                == os.stat(self.settings.state_dir).st_dev
            )
        except OSError:
            same = False
        if same:
            line += (
                f". The server's own log {self.settings.log_file} is on it too: set "
                "[agent] log_file to another disk"
            )
        return line

    def _server_outside(self) -> str | None:
        """A server the agent did not start: adopted (the recorded command, restarted by hand),
        or another program on the server's port while the agent's server is not running."""
        try:
            status = self.control.status()
            if status.adopted:
                return (
                    f"the server (pid {status.main_pid}) was started outside the agent with the "
                    "recorded command; the agent adopted it: its RAM counts as the server's and "
                    "the next change stops it"
                )
            if status.running:
                return None
            topology = read_topology(self.control.read_command())
            conflict = self.control.port_conflict(topology.host, topology.port)
        except KimiOpsError:
            return None  # the facts' own problems say what cannot be read
        if conflict is None:
            return None
        return f"running, not started by this agent: {conflict}; a start here would fail"

    def command_drift(self) -> str | None:
        """The warning when ``[agent] command`` was edited after the recorded command was taken
        from it (``ServerControl.command_edit``)."""
        try:
            edit = self.control.command_edit()
        except KimiOpsError as exc:
            return f"the server's command cannot be read: {exc}"
        return None if edit is None else command_drift(edit.configured, edit.taken_from)

    def adopt_configured_command(self) -> str:
        """Make an edited ``[agent] command`` the command the next start runs (the recorded one
        kept as the previous); the sentence that says what was done. Refused while an operation
        runs, for a command SGLang would not take, and by the systemd backend."""
        with self._lock:
            running = self.state.unfinished_operations()
            if running:
                held = running[0]
                raise OperationConflict(
                    f"operation {held.id} ({held.kind}) is running; adopt the command once it "
                    "has finished",
                    holder=held.actor,
                    since=held.created_at,
                )
            configured = list(self.settings.command)
            if self.control.command_edit() is None:
                return "[agent] command was not edited since it was recorded: nothing to adopt"
            try:
                validate_command(configured)
            except CommandLineError as exc:
                raise InputError(f"[agent] command is not a valid command line: {exc}") from exc
            self.control.adopt_configured()
        return (
            "command.json now holds [agent] command (the one before is kept as the previous "
            "command); the server runs the old one until it is restarted: /kimi restart"
        )

    def recent(self, limit: int = 20) -> list[OperationView]:
        return self.state.operations(limit)

    def revisions(self) -> list[RevisionView]:
        return self.state.revisions()

    def current(self) -> OperationView | None:
        """The operation running now, if any."""
        running = self.state.unfinished_operations()
        return running[0] if running else None

    # -- lifecycle ----------------------------------------------------------------------------

    def resume(self) -> list[int]:
        """Re-attach to every operation a previous agent left unfinished; returns their ids."""
        resumed: list[int] = []
        with self._lock:
            for view in self.state.unfinished_operations():
                if view.id in self._threads and self._threads[view.id].is_alive():
                    continue
                log.info("resuming operation %s (%s, %s)", view.id, view.kind, view.state)
                self._spawn(view.id)
                resumed.append(view.id)
        return resumed

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop watching (operations stay resumable); the server is left as it is."""
        self._ctx.stop.set()
        for thread in list(self._threads.values()):
            thread.join(timeout_s)

    def join(self, op_id: int, timeout_s: float) -> bool:
        """Wait for operation ``op_id``'s thread to end (tests, shutdown); True if it ended."""
        thread = self._threads.get(op_id)
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()


def _check_input(
    kind: OperationKind | str,
    actor: str,
    ratio: float | None,
    size_gb: float | None,
    revision: int | None,
    auto: bool = False,
) -> OperationKind:
    """The kind as an ``OperationKind`` once every value checks out; InputError otherwise."""
    try:
        kind = OperationKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in OperationKind)
        raise InputError(f"operation kind {kind!r} is not one of {known}") from None
    if not isinstance(actor, str) or not actor.strip() or len(actor) > _MAX_ACTOR:
        raise InputError(f"actor must be a non-empty name of at most {_MAX_ACTOR} characters")
    for name, value in (("ratio", ratio), ("size_gb", size_gb)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise InputError(f"{name} must be a number, not {value!r}")
        if value is not None and not math.isfinite(value):
            raise InputError(f"{name} {value!r} is not a finite number; try 2 or 4 (ratio)")
    if auto and (kind is not OperationKind.RESIZE or ratio is not None or size_gb is not None):
        raise InputError("auto is a resize to neither a ratio nor a size; give it alone")
    if kind is OperationKind.RESIZE:
        if ratio is None and size_gb is None and not auto:
            raise InputError("resize needs a ratio (e.g. 4) or a size_gb (whole GB per rank)")
        if revision is not None:
            raise InputError("resize takes a ratio or a size_gb, not a revision")
    elif ratio is not None or size_gb is not None:
        raise InputError(f"{kind} takes no ratio or size_gb (use resize to change the size)")
    if kind is not OperationKind.ROLLBACK and revision is not None:
        raise InputError(f"{kind} takes no revision (only rollback does)")
    if revision is not None and (isinstance(revision, bool) or not isinstance(revision, int)):
        raise InputError(f"revision must be a whole number, not {revision!r}")
    return kind
