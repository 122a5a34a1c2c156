"""What the engine's parts share: the context every operation thread runs in, how a start ended,
and how an event is emitted."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.agent.config import AgentSettings
from bot.agent.control.protocol import ServerControl
from bot.agent.engine.crash_points import NO_CRASHES, CrashPoints
from bot.agent.engine.notices import Notices
from bot.agent.host.probe import HostProbe
from bot.agent.state.agent_state import AgentState
from bot.clock import Clock
from bot.vocab import EventPhase, OperationState

__all__ = ["Abandoned", "Emit", "RunnerContext", "SGLangLike", "StartOutcome"]


class SGLangLike(Protocol):
    """The two SGLang endpoints the engine reads (``SGLangClient`` provides them)."""

    def health(self) -> int | None: ...

    def server_info(self) -> dict[str, Any] | None: ...


class Abandoned(Exception):
    """The agent is shutting down: stop watching, leave the operation to ``resume()``.

    Local to the engine: raised by the follower, caught by the runner, never seen outside.
    """


@dataclass
class RunnerContext:
    """What every operation thread shares."""

    settings: AgentSettings
    control: ServerControl
    probe: HostProbe
    sglang: SGLangLike
    state: AgentState
    clock: Clock
    health_grace_s: float
    crash_points: CrashPoints = NO_CRASHES
    stop: threading.Event = field(default_factory=threading.Event)
    notices: Notices = field(default_factory=Notices)


@dataclass(frozen=True)
class StartOutcome:
    """How one start ended: ready or not, whether a server was started at all (``started`` is
    False when the GPUs stayed busy or the backend refused: nothing to roll back from), the
    sentence a person reads, and the figures."""

    ready: bool
    message: str
    data: dict[str, Any]
    started: bool = True


class Emit(Protocol):
    def __call__(
        self,
        phase: EventPhase,
        message: str,
        data: dict[str, Any] | None = None,
        *,
        step: str | None = None,
        progress: float | None = None,
        state: OperationState | None = None,
    ) -> None: ...
