"""The composition root: the agent as one object, wired from its settings.

``build_service(settings)`` makes the real parts (the probe ``[agent] probe`` names, the backend
``[agent] backend`` names, the SGLang client, the state file, the clock) and composes facts and
the operation engine from them; ``create_app(service)`` serves it over HTTP. Every part can be
given instead (``control=``, ``probe=``, ``clock=``, ``sglang=``, ``state=``, ``crash_points=``,
``write_hook=``),
so tests hand the agent their doubles here rather than re-wiring the object graph themselves.

This is the only module that knows every implementation: the factories live here, so the
seams (``bot.agent.control``, ``bot.agent.host``) never import their implementations back.
"""

from __future__ import annotations

from typing import Any

from bot.agent.config import AgentSettings
from bot.agent.control.docker import DockerControl
from bot.agent.control.process import ProcessControl
from bot.agent.control.protocol import ServerControl
from bot.agent.control.systemd import SystemdControl
from bot.agent.engine.crash_points import NO_CRASHES, CrashPoints
from bot.agent.engine.live_change import (
    IdleRule,
    LiveChanges,
    LiveState,
    decide_on,
    state_of_command,
)
from bot.agent.engine.manager import OperationManager
from bot.agent.engine.post_ready import (
    DEFAULT_INTERVAL_S,
    NOTICES_FILE,
    MemoryNoticeLog,
    PostReadyWatch,
)
from bot.agent.facts.snapshot import FactsService
from bot.agent.host.probe import HostProbe
from bot.agent.host.system import SystemProbe
from bot.agent.http.status import status_body
from bot.agent.sglang_client import SGLangClient
from bot.agent.state.agent_state import AgentState
from bot.agent.state.views import OperationView, ProgressEvent, RevisionView
from bot.agent.tokens import TokenSet
from bot.agent.write_hook import NO_WRITE_HOOK, WriteHook
from bot.clock import Clock, SystemClock
from bot.errors import ConfigError
from bot.planner import ChangeRequest, LiveChange, Plan
from bot.vocab import OperationKind, ServerState

__all__ = ["AgentService", "build_service", "make_control", "make_probe"]


def make_control(
    settings: AgentSettings, clock: Clock | None = None, write_hook: WriteHook = NO_WRITE_HOOK
) -> ServerControl:
    """The backend ``[agent] backend`` names: "process", "systemd" or "docker"."""
    used_clock = clock if clock is not None else SystemClock()
    if settings.backend == "process":
        return ProcessControl.from_settings(settings, used_clock, write_hook)
    if settings.backend == "systemd":
        return SystemdControl.from_settings(settings, used_clock, write_hook)
    if settings.backend == "docker":
        return DockerControl.from_settings(settings, used_clock, write_hook)
    raise ConfigError(
        f"[agent] backend is {settings.backend!r}; expected one of: process, systemd, docker"
    )


def make_probe(settings: AgentSettings, clock: Clock | None = None) -> HostProbe:
    """The probe ``[agent] probe`` names: "host" (this machine) or "sim" (the simulator's host)."""
    if settings.probe == "host":
        return SystemProbe(clock=clock)
    if settings.probe == "sim":
        from bot.agent.host.sim import SimProbe  # the simulator is only needed here

        return SimProbe.from_settings(settings, clock)
    raise ConfigError(f"[agent] probe is {settings.probe!r}; expected one of: host, sim")


class AgentService:
    """What the HTTP API serves: facts for status and plans, the manager for operations.

    The parts it was built from stay readable (``control``, ``probe``, ``state``, ``clock``,
    ``sglang``), so a test asks the service, not a private attribute, what it runs on.
    """

    def __init__(
        self,
        settings: AgentSettings,
        facts: FactsService,
        manager: OperationManager,
        *,
        control: ServerControl,
        probe: HostProbe,
        sglang: SGLangClient,
        state: AgentState,
        clock: Clock,
        watch: PostReadyWatch,
        engine_sglang: SGLangClient | None = None,
    ) -> None:
        self.settings = settings
        self._engine_sglang = engine_sglang
        self.facts = facts
        self.manager = manager
        self.watch = watch
        self.control = control
        self.probe = probe
        self.sglang = sglang
        self.state = state
        self.clock = clock

    @property
    def tokens(self) -> TokenSet:
        return self.settings.tokens

    def status(self) -> dict[str, Any]:
        """The ``/v1/status`` body, with the running operation if there is one."""
        current = self.manager.current()
        snap = self.facts.snapshot()
        # Only a server that answers /health 200 serves /metrics; do not wait on one starting.
        up = snap.server.state is ServerState.RUNNING and snap.server.health_code == 200
        metrics = self.sglang.server_metrics() if up else None
        body = status_body(
            snap,
            None if current is None else current.to_dict(),
            metrics,
            self.settings.router_url or self.settings.server_url,
            self.manager.problems(),
            memory_watch=self.watch.status(),
            memory_problem=self.watch.problem(),
        )
        if up and self.settings.admin_api_key:
            body["hicache_live"] = self.live_hicache()
        return body

    def plan(self, request: ChangeRequest) -> tuple[Plan, str]:
        return self.facts.plan(request)

    def plan_live(self, change: LiveChange) -> dict[str, Any]:
        """Live or restart for ``change``, why, and the expected wait (docs/sglang.md)."""
        assert self.manager.live is not None
        return self.manager.live.proposal(change)

    def submit_live(
        self, change: LiveChange, actor: str, caller: str | None = None
    ) -> OperationView:
        return self.manager.submit_live(change, actor, caller)

    def live_hicache(self) -> dict[str, Any] | None:
        """``GET /hicache/storage-backend`` beside the command line's values; None when the
        agent holds no admin key."""
        if not self.settings.admin_api_key:
            return None
        reply = self.sglang.storage_status()
        argv = self.control.read_command()
        return {
            "live": None if reply.live is None else LiveState.of(reply.live).to_dict(),
            "command_line": state_of_command(argv).to_dict(),
            "status_code": reply.status_code,
            "message": None if reply.ok else reply.message,
        }

    def submit(
        self,
        kind: OperationKind,
        actor: str,
        ratio: float | None = None,
        size_gb: float | None = None,
        revision: int | None = None,
        fingerprint: str | None = None,
        caller: str | None = None,
        auto: bool = False,
    ) -> OperationView:
        return self.manager.submit(
            kind,
            actor,
            ratio=ratio,
            size_gb=size_gb,
            auto=auto,
            revision=revision,
            fingerprint=fingerprint,
            caller=caller,
        )

    def get(self, op_id: int) -> OperationView:
        return self.manager.get(op_id)

    def wait_events(
        self, op_id: int, after: int, wait_s: float
    ) -> tuple[OperationView, list[ProgressEvent]]:
        return self.manager.wait_events(op_id, after, wait_s)

    def wait_changed(self, timeout_s: float) -> bool:
        """Block until the state commits an event or an operation change (True), or
        ``timeout_s`` passes (False): what wakes the API's long-polls."""
        return self.state.wait_changed(timeout_s)

    def recent(self, limit: int) -> list[OperationView]:
        return self.manager.recent(limit)

    def revisions(self) -> list[RevisionView]:
        return self.manager.revisions()

    def resume(self) -> list[int]:
        """Re-attach to operations left unfinished by an earlier run of the agent, and start
        the post-ready memory watch; the operations' ids."""
        resumed = self.manager.resume()
        self.watch.start()
        return resumed

    def close(self) -> None:
        """Stop watching (the server keeps running) and release the client and the state."""
        self.watch.stop()
        self.manager.close()
        self.sglang.close()
        if self._engine_sglang is not None and self._engine_sglang is not self.sglang:
            self._engine_sglang.close()
        self.state.close()


def build_service(
    settings: AgentSettings,
    *,
    clock: Clock | None = None,
    control: ServerControl | None = None,
    probe: HostProbe | None = None,
    sglang: SGLangClient | None = None,
    state: AgentState | None = None,
    crash_points: CrashPoints | None = None,
    health_grace_s: float | None = None,
    write_hook: WriteHook = NO_WRITE_HOOK,
    watch_interval_s: float = DEFAULT_INTERVAL_S,
) -> AgentService:
    """Compose the agent from ``settings`` (whose loading already checked the token); each
    keyword replaces the part the settings would make. ``write_hook`` is given to the control
    and the state the root makes (``bot.agent.write_hook``: a test's kill in mid-write);
    ``watch_interval_s`` is how often the post-ready memory watch samples a serving server."""
    used_clock = clock if clock is not None else SystemClock()
    used_probe = probe if probe is not None else make_probe(settings, used_clock)
    used_control = (
        control if control is not None else make_control(settings, used_clock, write_hook)
    )
    # Two clients on their own timeouts: status answers in bounded time, while the engine
    # waits as long as a loaded server's /health may take (bot.agent.config). Both hold the
    # admin key: status reads the storage tier live, the engine changes it.
    used_sglang = (
        sglang
        if sglang is not None
        else SGLangClient(
            settings.server_url,
            timeout=settings.status_timeout_s,
            admin_api_key=settings.admin_api_key,
        )
    )
    engine_sglang = (
        sglang
        if sglang is not None
        else SGLangClient(
            settings.server_url,
            timeout=settings.health_timeout_s,
            admin_api_key=settings.admin_api_key,
        )
    )
    used_state = state if state is not None else AgentState(settings.state_dir, write_hook)
    facts = FactsService(settings, used_probe, used_control, used_sglang, used_state, used_clock)
    manager = OperationManager(
        settings,
        used_control,
        used_probe,
        engine_sglang,
        used_state,
        used_clock,
        facts.plan,
        health_grace_s=health_grace_s,
        crash_points=NO_CRASHES if crash_points is None else crash_points,
        live=lambda ctx: LiveChanges(
            ctx,
            used_sglang,
            lambda change: decide_on(facts.snapshot(), change, settings, used_sglang, settings.env),
            IdleRule(interval_s=settings.poll_interval_s, timeout_s=settings.live_idle_timeout_s),
        ),
    )
    watch = PostReadyWatch(
        used_probe,
        used_control,
        used_sglang,
        lambda: manager.current() is not None,
        used_clock,
        MemoryNoticeLog(settings.state_dir / NOTICES_FILE),
        settings.guard.floor_bytes,
        interval_s=watch_interval_s,
    )
    return AgentService(
        settings,
        facts,
        manager,
        control=used_control,
        probe=used_probe,
        sglang=used_sglang,
        state=used_state,
        clock=used_clock,
        watch=watch,
        engine_sglang=engine_sglang,
    )
