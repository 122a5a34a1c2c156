"""The agent as one object: facts and the operation engine, composed from the settings.

``build_service(settings)`` wires the real parts (the probe, the control backend, the SGLang
client, the state file, the clock); ``create_app(service)`` serves it over HTTP. Tests build the
same service on a temporary state directory and the simulator.
"""

from __future__ import annotations

from typing import Any

from bot.agent.config import AgentSettings
from bot.agent.control import make_control
from bot.agent.facts import FactsService
from bot.agent.operations import OperationManager
from bot.agent.probe import make_probe
from bot.agent.sglang_client import SGLangClient
from bot.agent.state import AgentState, OperationEvent, OperationView, RevisionView
from bot.clock import Clock, SystemClock
from bot.planner import ChangeRequest, Plan
from bot.settings import Secret

__all__ = ["AgentService", "build_service"]


class AgentService:
    """What the HTTP API serves: facts for status and plans, the manager for operations."""

    def __init__(
        self,
        settings: AgentSettings,
        facts: FactsService,
        manager: OperationManager,
        sglang: SGLangClient | None = None,
        state: AgentState | None = None,
    ) -> None:
        self.settings = settings
        self.facts = facts
        self.manager = manager
        self._sglang = sglang
        self._state = state

    @property
    def token(self) -> Secret:
        return self.settings.token

    def status(self) -> dict[str, Any]:
        """The ``/v1/status`` body, with the running operation if there is one."""
        current = self.manager.current()
        return self.facts.status(None if current is None else current.to_dict())

    def plan(self, request: ChangeRequest) -> tuple[Plan, str]:
        return self.facts.plan(request)

    def submit(
        self,
        kind: str,
        actor: str,
        ratio: float | None = None,
        size_gb: float | None = None,
        revision: int | None = None,
        fingerprint: str | None = None,
    ) -> OperationView:
        return self.manager.submit(
            kind,
            actor,
            ratio=ratio,
            size_gb=size_gb,
            revision=revision,
            fingerprint=fingerprint,
        )

    def get(self, op_id: int) -> OperationView:
        return self.manager.get(op_id)

    def wait_events(
        self, op_id: int, after: int, wait_s: float
    ) -> tuple[OperationView, list[OperationEvent]]:
        return self.manager.wait_events(op_id, after, wait_s)

    def recent(self, limit: int) -> list[OperationView]:
        return self.manager.recent(limit)

    def revisions(self) -> list[RevisionView]:
        return self.manager.revisions()

    def resume(self) -> None:
        """Re-attach to an operation left unfinished by an earlier run of the agent."""
        self.manager.resume()

    def close(self) -> None:
        """Stop watching (the server keeps running) and release the client and the state."""
        self.manager.close()
        if self._sglang is not None:
            self._sglang.close()
        if self._state is not None:
            self._state.close()


def build_service(settings: AgentSettings, *, clock: Clock | None = None) -> AgentService:
    """Compose the agent from ``settings`` (whose loading already checked the token)."""
    used_clock = clock if clock is not None else SystemClock()
    probe = make_probe(settings)
    control = make_control(settings, used_clock)
    sglang = SGLangClient(settings.server_url)
    state = AgentState(settings.state_dir)
    facts = FactsService(settings, probe, control, sglang, state, used_clock)
    manager = OperationManager(settings, control, probe, sglang, state, used_clock, facts.plan)
    return AgentService(settings, facts, manager, sglang=sglang, state=state)
