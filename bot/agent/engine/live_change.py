"""A live change: HiCache's storage tier and policies changed through SGLang's runtime API, with
no restart (docs/sglang.md, Live changes).

An operation of kind ``live`` goes::

    planned -> waiting_idle (GET /v1/loads: nothing running or queued on any DP rank,
               ``IdleRule.polls`` answers in a row)
            -> applying (PUT / DELETE /hicache/storage-backend, or POST .../clear)
            -> verifying (GET /hicache/storage-backend shows the target)
            -> the command line rewritten to say the same (the control backend's write, no
               restart), so a later restart keeps it
            -> ready

A refusal by SGLang (not idle after all, a bad config, a wrong admin key) ends it failed with
SGLang's own words, and nothing else changes. A verify that does not show the target reverts
the server to the values it had before, through the same API, and ends it failed. The
revision the operation records (kind ``live``) holds the rewritten command line and its
outcome, so a rollback to an earlier revision that differs from it only in these flags is live
too (:func:`live_rollback_target`).

The work is a change of *state*: the target values (backend, extra config, the two policies)
are computed from the live values and the change, and the API calls are the steps from one to
the other (:func:`steps_between`), which is also how a revert or a rollback is made.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from bot.agent.cmdline import read_hicache, read_option, rewrite_options
from bot.agent.config import AgentSettings
from bot.agent.engine.context import RunnerContext
from bot.agent.engine.event_log import EventLog, iso
from bot.agent.facts import FactsSnapshot
from bot.agent.facts._sources import version_of
from bot.agent.sglang_client import AdminReply, LiveHiCache, ServerLoad
from bot.agent.state.views import RevisionOutcome
from bot.errors import CommandLineError, InputError
from bot.planner import (
    AdminKey,
    HostMemory,
    LiveChange,
    LiveDecision,
    LiveFacts,
    SGLangVersion,
    StorageBackend,
    decide_live,
)
from bot.vocab import (
    ApplyMode,
    EventPhase,
    FailureKind,
    LiveChangeKind,
    OperationKind,
    OperationState,
)

__all__ = [
    "IdleRule",
    "LiveApi",
    "LiveChanges",
    "LiveRunner",
    "LiveState",
    "admin_key_state",
    "command_for",
    "decide_on",
    "live_facts",
    "state_of_command",
    "steps_between",
    "target_state",
]

log = logging.getLogger(__name__)

BACKEND = "--hicache-storage-backend"
EXTRA = "--hicache-storage-backend-extra-config"
PREFETCH = "--hicache-storage-prefetch-policy"
WRITE = "--hicache-write-policy"
ADMIN = "--admin-api-key"
#: SGLang 0.5.23's defaults (``srt/arg_groups/fields/memory.py``).
DEFAULT_PREFETCH = "timeout"
DEFAULT_WRITE = "write_through"


class LiveApi(Protocol):
    """The runtime API and the load, as :class:`~bot.agent.sglang_client.SGLangClient` has them."""

    def load(self) -> ServerLoad | None: ...

    def storage_status(self) -> AdminReply: ...

    def attach_storage(
        self,
        backend: str,
        extra_config_json: str | None = None,
        prefetch_policy: str | None = None,
        write_policy: str | None = None,
    ) -> AdminReply: ...

    def detach_storage(self) -> AdminReply: ...

    def clear_storage(self) -> AdminReply: ...


@dataclass(frozen=True)
class IdleRule:
    """Idle is ``polls`` answers in a row with nothing running or queued, ``interval_s`` apart,
    waited for at most ``timeout_s``."""

    polls: int = 3
    interval_s: float = 1.0
    timeout_s: float = 600.0

    @property
    def expected_wait_s(self) -> float:
        """The wait on a server already idle: the polls in a row."""
        return max(0, self.polls - 1) * self.interval_s


@dataclass(frozen=True)
class LiveState:
    """The four values the runtime API sets."""

    backend: str | None
    extra_config: str | None
    prefetch_policy: str
    write_policy: str

    @classmethod
    def of(cls, live: LiveHiCache) -> LiveState:
        return cls(
            live.storage_backend,
            live.extra_config if live.storage_backend is not None else None,
            live.prefetch_policy or DEFAULT_PREFETCH,
            live.write_policy or DEFAULT_WRITE,
        )

    def shows_state(self, got: LiveState) -> bool:
        """Whether ``GET`` shows this state (the extra config only when one was asked for)."""
        same = (got.backend, got.prefetch_policy, got.write_policy) == (
            self.backend,
            self.prefetch_policy,
            self.write_policy,
        )
        return same and (self.extra_config is None or got.extra_config == self.extra_config)

    def to_dict(self) -> dict[str, Any]:
        return {
            "storage_backend": self.backend,
            "extra_config": self.extra_config,
            "prefetch_policy": self.prefetch_policy,
            "write_policy": self.write_policy,
        }


def state_of_command(argv: Sequence[str]) -> LiveState:
    """What a server started with ``argv`` begins with."""
    backend = read_option(argv, BACKEND)
    return LiveState(
        backend,
        read_option(argv, EXTRA) if backend is not None else None,
        read_option(argv, PREFETCH) or DEFAULT_PREFETCH,
        read_option(argv, WRITE) or DEFAULT_WRITE,
    )


def target_state(before: LiveState, change: LiveChange) -> LiveState:
    """The values after ``change`` on a server at ``before``."""
    kind = change.kind
    if kind is LiveChangeKind.STORAGE_ATTACH:
        same = before.backend == change.backend
        extra = change.extra_config if change.extra_config is not None else None
        return replace(
            before,
            backend=change.backend,
            extra_config=before.extra_config if same and extra is None else extra,
        )
    if kind is LiveChangeKind.STORAGE_DETACH:
        return replace(before, backend=None, extra_config=None)
    if kind is LiveChangeKind.WRITE_POLICY:
        assert change.policy is not None
        return replace(before, write_policy=change.policy)
    if kind is LiveChangeKind.PREFETCH_POLICY:
        assert change.policy is not None
        return replace(before, prefetch_policy=change.policy)
    return before  # a clear changes no value


@dataclass(frozen=True)
class Step:
    """One call of the runtime API."""

    verb: str  # attach | detach | clear
    backend: str | None = None
    extra_config: str | None = None
    prefetch_policy: str | None = None
    write_policy: str | None = None

    def phrase(self) -> str:
        if self.verb == "attach":
            return f"PUT /hicache/storage-backend ({self.backend})"
        if self.verb == "detach":
            return "DELETE /hicache/storage-backend"
        return "POST /hicache/storage-backend/clear"


def steps_between(before: LiveState, after: LiveState) -> list[Step] | None:
    """The API calls that take a server from ``before`` to ``after``; None when the API cannot
    (policies change with no backend to PUT them through)."""
    steps: list[Step] = []
    now = before
    if now.backend is not None and now.backend != after.backend:
        if after.backend is None and _policies(now) != _policies(after):
            # Policies are set only through an attached backend: before it goes.
            steps.append(Step("attach", now.backend, None, *_changed(now, after)))
            now = replace(
                now, prefetch_policy=after.prefetch_policy, write_policy=after.write_policy
            )
        steps.append(Step("detach"))
        now = replace(now, backend=None, extra_config=None)
    if after.backend is None:
        return steps if _policies(now) == _policies(after) else None
    attaching = now.backend != after.backend
    if attaching or now != after:
        extra = after.extra_config if attaching else None
        steps.append(Step("attach", after.backend, extra, *_changed(now, after)))
    return steps


def _policies(state: LiveState) -> tuple[str, str]:
    return state.prefetch_policy, state.write_policy


def _changed(now: LiveState, after: LiveState) -> tuple[str | None, str | None]:
    """The policies to send: those that change (None: left as they are)."""
    return (
        after.prefetch_policy if after.prefetch_policy != now.prefetch_policy else None,
        after.write_policy if after.write_policy != now.write_policy else None,
    )


def command_for(argv: Sequence[str], after: LiveState) -> list[str]:
    """``argv`` saying ``after``: each of the four flags set where it differs from what the
    command line already resolves to (a detach removes the backend and its extra config)."""
    now = state_of_command(argv)
    values: dict[str, str | None] = {}
    if after.backend != now.backend:
        values[BACKEND] = after.backend
    if after.backend is None:
        if read_option(argv, EXTRA) is not None:
            values[EXTRA] = None
    elif after.extra_config != now.extra_config and after.extra_config is not None:
        values[EXTRA] = after.extra_config
    if after.prefetch_policy != now.prefetch_policy:
        values[PREFETCH] = after.prefetch_policy
    if after.write_policy != now.write_policy:
        values[WRITE] = after.write_policy
    return rewrite_options(argv, values) if values else list(argv)


def admin_key_state(argv: Sequence[str], settings: AgentSettings) -> AdminKey:
    """The server's ``--admin-api-key`` (from its command line) against the agent's key."""
    try:
        server_key = read_option(argv, ADMIN)
    except CommandLineError:
        server_key = None
    if not server_key:
        return AdminKey.SERVER_HAS_NONE
    held = settings.admin_api_key
    if not held:
        return AdminKey.AGENT_HAS_NONE
    if not hmac.compare_digest(server_key.encode(), held.reveal().encode()):
        return AdminKey.DIFFERS
    return AdminKey.HELD


def live_facts(
    argv: Sequence[str],
    version: SGLangVersion,
    settings: AgentSettings,
    live: LiveHiCache | None,
    **more: Any,
) -> LiveFacts:
    """The decision's facts: the live ``GET`` when the server gave it, else the command line."""
    attached = live.storage_backend if live is not None else read_option(argv, BACKEND)
    return LiveFacts(
        version=version,
        hicache_enabled=read_hicache(argv).enabled,
        admin_key=admin_key_state(argv, settings),
        attached_backend=attached,
        headroom_gb=settings.headroom_gb,
        **more,
    )


class LiveFailed(Exception):
    """A live change that did not happen; the message is what the person reads. Control flow
    local to this module (as the engine's ``Abandoned``), outside ``bot.errors``' tree: caught
    by :class:`LiveRunner`, never raised past it."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data = data or {}


class LiveRunner:
    """Carries out live operation ``op_id`` (its request holds the change or the target)."""

    def __init__(
        self,
        ctx: RunnerContext,
        op_id: int,
        api: LiveApi,
        idle: IdleRule,
        target: Callable[[LiveState], LiveState],
        phrase: str,
        clear: bool = False,
        command: Sequence[str] | None = None,
    ) -> None:
        self.ctx = ctx
        self.op_id = op_id
        self.api = api
        self.idle = idle
        self.target = target
        self.phrase = phrase
        self.clear = clear
        # A rollback writes its revision's command line as it was; a change rewrites the flags.
        self.command = None if command is None else list(command)
        self.events = EventLog(ctx, op_id)

    def run(self) -> None:
        view = self.ctx.state.operation(self.op_id)
        assert view is not None
        assert view.revision is not None
        rev_id = view.revision
        try:
            message, data = self._run(rev_id)
        except LiveFailed as exc:
            self._end(rev_id, OperationState.FAILED, str(exc), exc.data)
        except Exception as exc:  # the thread's last word: never leave the operation running
            log.exception("live operation %s failed", self.op_id)
            self._end(rev_id, OperationState.FAILED, f"the agent failed: {exc}", {})
        else:
            self._end(rev_id, OperationState.READY, message, data)

    def _run(self, rev_id: int) -> tuple[str, dict[str, Any]]:
        before = self._get("before the change")
        after = self.target(before)
        steps = [Step("clear")] if self.clear else steps_between(before, after)
        if steps is None:
            raise LiveFailed(
                "SGLang's runtime API cannot make this change: policies change only with a "
                "storage backend attached; nothing was changed"
            )
        waited = self._wait_idle()
        done: list[Step] = []
        for step in steps:
            self.events.emit(EventPhase.APPLYING, f"{step.phrase()}", {"after_idle_s": waited})
            reply = self._call(step)
            if not reply.ok:
                if done:
                    self._revert(before)
                raise LiveFailed(
                    f"SGLang refused {step.phrase()}: {reply.message}; nothing was changed",
                    {"status_code": reply.status_code, "sglang_message": reply.message},
                )
            done.append(step)
        self.events.emit(EventPhase.VERIFYING, "GET /hicache/storage-backend")
        shown = self._get("after the change")
        if not self.clear and not after.shows_state(shown):
            self._revert(before)
            raise LiveFailed(
                f"SGLang accepted the change but GET /hicache/storage-backend shows "
                f"{shown.to_dict()}, not {after.to_dict()}: reverted to {before.to_dict()}",
                {"shown": shown.to_dict(), "asked": after.to_dict()},
            )
        argv = self.ctx.control.read_command()
        written = self.command if self.command is not None else command_for(argv, after)
        if written != argv:
            self.ctx.control.write_command(written)
        return (
            f"{self.phrase}: live, no restart (waited {waited:.1f} s for the server to be "
            "idle); the command line says the same, so a restart keeps it",
            {"live": after.to_dict(), "waited_idle_s": round(waited, 1)},
        )

    def _get(self, when: str) -> LiveState:
        reply = self.api.storage_status()
        if not reply.ok or reply.live is None:
            raise LiveFailed(
                f"GET /hicache/storage-backend {when} answered {reply.status_code}: "
                f"{reply.message}; nothing was changed",
                {"status_code": reply.status_code, "sglang_message": reply.message},
            )
        return LiveState.of(reply.live)

    def _wait_idle(self) -> float:
        rule, clock = self.idle, self.ctx.clock
        self.events.emit(
            EventPhase.WAITING_IDLE,
            f"waiting for the server to be idle ({rule.polls} polls of /v1/loads in a row)",
        )
        started = clock.monotonic()
        in_a_row = 0
        last: ServerLoad | None = None
        while True:
            last = self.api.load()
            in_a_row = in_a_row + 1 if last is not None and last.idle else 0
            waited = clock.monotonic() - started
            if in_a_row >= rule.polls:
                return waited
            if waited >= rule.timeout_s or self.ctx.stop.is_set():
                busy = (
                    "its load could not be read"
                    if last is None
                    else f"{last.running} running, {last.waiting} queued"
                )
                raise LiveFailed(
                    f"the server was not idle within {rule.timeout_s:g} s ({busy}); "
                    "nothing was changed"
                )
            clock.sleep(rule.interval_s)

    def _call(self, step: Step) -> AdminReply:
        if step.verb == "detach":
            return self.api.detach_storage()
        if step.verb == "clear":
            return self.api.clear_storage()
        assert step.backend is not None
        return self.api.attach_storage(
            step.backend, step.extra_config, step.prefetch_policy, step.write_policy
        )

    def _revert(self, before: LiveState) -> None:
        """Back to ``before`` through the API, from whatever GET shows now (best effort: the
        operation fails either way, and says what it saw)."""
        reply = self.api.storage_status()
        if reply.live is None:
            return
        for step in steps_between(LiveState.of(reply.live), before) or []:
            self._call(step)

    def _end(self, rev_id: int, state: OperationState, message: str, data: dict[str, Any]) -> None:
        now = iso(self.ctx.clock.now())
        ready = state is OperationState.READY
        self.ctx.state.update_revision(
            rev_id,
            outcome=RevisionOutcome.READY if ready else RevisionOutcome.FAILED,
            became_ready=ready,
            finished_at=now,
        )
        self.ctx.state.update_operation(
            self.op_id,
            outcome=message,
            finished_at=now,
            **({} if ready else {"failure": {"kind": FailureKind.LIVE_REFUSED.value, **data}}),
        )
        self.events.emit(
            EventPhase(state.value), message, data, progress=1.0 if ready else None, state=state
        )


def proposal_body(decision: LiveDecision, idle: IdleRule) -> dict[str, Any]:
    """What a proposal shows: live or restart, why, and the wait expected before the change."""
    body = decision.to_dict()
    body["expected_wait_s"] = idle.expected_wait_s if decision.live else None
    return body


Decide = Callable[[LiveChange], LiveDecision]


class LiveChanges:
    """Plans, records and runs live operations for :class:`OperationManager` (which holds the
    one-operation-at-a-time lock and the threads)."""

    def __init__(self, ctx: RunnerContext, api: LiveApi, decide: Decide, idle: IdleRule) -> None:
        self.ctx = ctx
        self.api = api
        self.decide = decide
        self.idle = idle

    def proposal(self, change: LiveChange) -> dict[str, Any]:
        """Live or restart, why, and the expected wait: what a proposal shows."""
        return proposal_body(self.decide(change), self.idle)

    def decision(self, change: LiveChange) -> LiveDecision:
        """The decision for ``change``, live or restart; InputError, with its reason, when it
        is refused or cannot be made by a restart either."""
        decision = self.decide(change)
        if decision.mode is ApplyMode.REFUSED:
            raise InputError(f"{change.phrase()}: refused: {decision.reason}")
        if decision.mode is ApplyMode.RESTART:
            if change.kind is LiveChangeKind.STORAGE_CLEAR:
                raise InputError(f"clearing the storage backend {decision.reason}")
            if change.backend == StorageBackend.MOONCAKE:
                raise InputError(
                    f"{change.phrase()} {decision.reason} Mooncake's segment is host RAM: put it "
                    "on the command line and plan it with a resize"
                )
        return decision

    def restart_command(self, change: LiveChange) -> list[str]:
        """The command line a restart for ``change`` starts: its flags as the change leaves
        them."""
        argv = self.ctx.control.read_command()
        return command_for(argv, target_state(state_of_command(argv), change))

    def record(
        self, change: LiveChange, decision: LiveDecision, actor: str, caller: str | None
    ) -> int:
        """Record a live operation for ``change`` (decided live) and its revision."""
        argv = self.ctx.control.read_command()
        # The revision records the command line the change leads to, as far as the command
        # line alone tells it (the runner writes the one computed from the live values).
        after = target_state(state_of_command(argv), change)
        request = {"kind": "live", "change": change.to_dict()}
        return self._record(actor, caller, request, command_for(argv, after), decision)

    def record_rollback(
        self, target_argv: Sequence[str], rev_id: int, actor: str, caller: str | None
    ) -> int | None:
        """A rollback to revision ``rev_id`` made live, or None when it must restart: the two
        command lines differ only in the runtime API's flags and the server allows it."""
        argv = self.ctx.control.read_command()
        if not _same_but_live_flags(argv, target_argv):
            return None
        probe = LiveChange(LiveChangeKind.STORAGE_CLEAR)
        decision = self.decide(probe)
        if decision.mode is not ApplyMode.LIVE and "no storage backend" not in decision.reason:
            return None
        target = state_of_command(target_argv)
        before = state_of_command(argv)
        if steps_between(before, target) is None:
            return None
        request = {"kind": "live", "rollback_to": rev_id, "target": target.to_dict()}
        rollback = LiveDecision(probe, ApplyMode.LIVE, f"live rollback to revision {rev_id}")
        return self._record(actor, caller, request, list(target_argv), rollback, rev_id)

    def _record(
        self,
        actor: str,
        caller: str | None,
        request: dict[str, Any],
        argv: list[str],
        decision: LiveDecision,
        rollback_of: int | None = None,
    ) -> int:
        now = iso(self.ctx.clock.now())
        phrase = _request_phrase(request)
        op_id, _ = self.ctx.state.record_operation(
            kind=OperationKind.LIVE,
            actor=actor,
            created_at=now,
            request=request,
            plan=None,
            argv=argv,
            hicache=dataclasses.asdict(read_hicache(argv)),
            rollback_of=rollback_of,
            caller=caller,
            expected_gb=None,
            message=(
                f"{phrase} by {actor}: {decision.reason} Expected wait for idle: "
                f"{self.idle.expected_wait_s:.1f} s when nothing runs."
            ),
            data={
                "decision": decision.to_dict(),
                "expected_wait_s": self.idle.expected_wait_s,
            },
        )
        return op_id

    def runner(self, op_id: int) -> LiveRunner:
        view = self.ctx.state.operation(op_id)
        assert view is not None
        request = dict(view.request)
        clear = False
        command: list[str] | None = None
        target: Callable[[LiveState], LiveState]
        if "target" in request:
            revision = self.ctx.state.revision(int(request["rollback_to"]))
            command = None if revision is None else list(revision.argv)
            fixed = LiveState(
                request["target"]["storage_backend"],
                request["target"]["extra_config"],
                request["target"]["prefetch_policy"],
                request["target"]["write_policy"],
            )

            def target(_before: LiveState) -> LiveState:
                return fixed
        else:
            change = LiveChange(
                kind=LiveChangeKind(request["change"]["kind"]),
                backend=request["change"]["backend"],
                extra_config=request["change"]["extra_config"],
                policy=request["change"]["policy"],
            )
            clear = change.kind is LiveChangeKind.STORAGE_CLEAR

            def target(before: LiveState) -> LiveState:
                return target_state(before, change)

        return LiveRunner(
            self.ctx, op_id, self.api, self.idle, target, _request_phrase(request), clear, command
        )


def _request_phrase(request: dict[str, Any]) -> str:
    if "rollback_to" in request:
        return f"live rollback to revision {request['rollback_to']}"
    change = request["change"]
    return LiveChange(
        kind=LiveChangeKind(change["kind"]),
        backend=change["backend"],
        extra_config=change["extra_config"],
        policy=change["policy"],
    ).phrase()


def _same_but_live_flags(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two command lines differ only in the runtime API's four flags."""
    cleared = {BACKEND: None, EXTRA: None, PREFETCH: None, WRITE: None}
    try:
        return rewrite_options(a, cleared) == rewrite_options(b, cleared)
    except CommandLineError:
        return False


def decide_on(
    snap: FactsSnapshot,
    change: LiveChange,
    settings: AgentSettings,
    api: LiveApi,
    environ: Mapping[str, str] | None = None,
) -> LiveDecision:
    """The decision on a facts snapshot, with the live values when the server gives them."""
    argv = list(snap.command or ())
    reply = api.storage_status()
    topology = snap.topology
    memory = None
    if snap.ram is not None:
        memory = HostMemory(
            available_bytes=snap.ram.available_bytes,
            cgroup_limit_bytes=snap.ram.cgroup_limit_bytes,
            cgroup_headroom_bytes=snap.ram.cgroup_headroom_bytes,
            cgroup_path=snap.ram.cgroup_path,
            total_bytes=snap.ram.total_bytes,
        )
    ranks: dict[str, int] = {}
    if topology is not None:
        attention_tp = topology.tp // topology.dp if topology.dp_attention else topology.tp
        ranks = {
            "storage_ranks": max(1, attention_tp) * max(1, topology.pp),
            "local_ranks": topology.local_ranks,
        }
    facts = live_facts(
        argv,
        version_of(snap.server.version),
        settings,
        reply.live if reply.ok else None,
        memory=memory,
        environ=dict(environ or {}),
        **ranks,
    )
    return decide_live(change, facts)
