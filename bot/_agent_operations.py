"""A host agent's operations as it reports them, for :mod:`bot.agent_json`: the operation, its
events page by page, the revisions (command lines) it ran, and what each start logged or why it
failed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot._agent_fields import (
    Json,
    enum_value,
    field_of,
    instant,
    mapping,
    number,
    optional,
    optional_instant,
    texts,
)
from bot._agent_plans import AgentPlan
from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, FailureKind, OperationKind, OperationState

__all__ = [
    "AgentEvent",
    "AgentFailure",
    "AgentOperation",
    "AgentRevision",
    "OperationPage",
    "StartFigures",
    "read_events",
    "read_revisions",
]

# -- what a start logged, and why it failed ---------------------------------------------------


@dataclass(frozen=True)
class StartFigures:
    """What one start logged: its seconds to ready, the device pool's tokens and the host pool
    per rank in GB (1e9) and tokens. None where the start did not get that far."""

    startup_seconds: float | None = None
    device_tokens: int | None = None
    host_gb_per_rank: float | None = None
    host_tokens_per_rank: int | None = None

    @classmethod
    def from_json(cls, data: Json, where: str = "the agent's event data") -> StartFigures:
        """The figures in a ``ready`` / ``rolled_back`` event's data, a failure or a revision.

        >>> StartFigures.from_json({"startup_s": 1.42, "device_tokens": 200000,
        ...                         "host_gb_per_rank": 12.0, "host_tokens_per_rank": 341531})
        StartFigures(startup_seconds=1.42, device_tokens=200000, host_gb_per_rank=12.0, host_tokens_per_rank=341531)
        """  # noqa: E501
        return cls(
            startup_seconds=number(data, "startup_s", where),
            device_tokens=optional(data, "device_tokens", int, where),
            host_gb_per_rank=number(data, "host_gb_per_rank", where),
            host_tokens_per_rank=optional(data, "host_tokens_per_rank", int, where),
        )


@dataclass(frozen=True)
class AgentFailure:
    """Why a start failed, as the agent decided: its kind, its sentence, SGLang's decisive log
    lines (none when no server ran) and what the start logged before it died."""

    kind: FailureKind
    message: str
    lines: tuple[str, ...]
    figures: StartFigures
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, value: object, where: str) -> AgentFailure:
        data = mapping(value, where)
        return cls(
            kind=enum_value(FailureKind, field_of(data, "kind", str, where), f"{where}'s kind"),
            message=str(data.get("message") or ""),
            lines=texts(data, "lines", where),
            figures=StartFigures.from_json(data, where),
            raw=dict(data),
        )


# -- operations and their events --------------------------------------------------------------


@dataclass(frozen=True)
class AgentOperation:
    """One operation as the agent reports it; ``revision`` is the agent's revision it started,
    ``rollback_of`` the one it rolled back from."""

    id: int
    kind: OperationKind
    state: OperationState
    actor: str
    created_at: datetime
    finished_at: datetime | None
    plan: AgentPlan | None
    revision: int | None
    rollback_of: int | None
    outcome: str | None
    failure: AgentFailure | None
    raw: Json = field(repr=False, compare=False)
    #: The name of the agent token that started it (absent from older agents' answers).
    caller: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL_OPERATION_STATES

    @classmethod
    def from_json(cls, body: object) -> AgentOperation:
        op = mapping(body, "the agent's operation")
        op_id = field_of(op, "id", int, "the agent's operation")
        where = f"the agent's operation {op_id}"
        plan, failure = op.get("plan"), op.get("failure")
        failed = None if failure is None else AgentFailure.from_json(failure, f"{where}'s failure")
        return cls(
            id=op_id,
            kind=enum_value(OperationKind, field_of(op, "kind", str, where), f"{where}'s kind"),
            state=enum_value(OperationState, field_of(op, "state", str, where), f"{where}'s state"),
            actor=field_of(op, "actor", str, where),
            created_at=instant(field_of(op, "created_at", str, where), f"{where}'s created_at"),
            finished_at=optional_instant(op, "finished_at", where),
            plan=None if not plan else AgentPlan.from_json(plan),
            revision=optional(op, "revision", int, where),
            rollback_of=optional(op, "rollback_of", int, where),
            outcome=optional(op, "outcome", str, where),
            failure=failed,
            raw=dict(op),
            caller=optional(op, "caller", str, where),
        )


@dataclass(frozen=True)
class AgentEvent:
    """One step of an operation; ``seq`` counts 1, 2, 3 ... without gaps."""

    seq: int
    at: datetime
    phase: EventPhase
    message: str
    progress: float
    data: Json = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: object) -> AgentEvent:
        event = mapping(body, "an event of the agent's operation")
        seq = field_of(event, "seq", int, "an event of the agent's operation")
        where = f"the agent's event {seq}"
        return cls(
            seq=seq,
            at=instant(field_of(event, "at", str, where), f"{where}'s time"),
            phase=enum_value(EventPhase, field_of(event, "phase", str, where), f"{where}'s phase"),
            message=field_of(event, "message", str, where),
            progress=number(event, "progress", where) or 0.0,
            data=dict(mapping(event.get("data", {}), f"{where}'s data")),
        )

    def to_json(self) -> dict[str, Any]:
        """The agent's JSON again (for fixtures and the audit)."""
        return {
            "seq": self.seq,
            "at": self.at.isoformat(),
            "phase": self.phase.value,
            "message": self.message,
            "progress": self.progress,
            "data": dict(self.data),
        }


def read_events(page: object) -> tuple[AgentEvent, ...]:
    """The events of a ``GET /v1/operations/{id}`` page (``{"events": [...]}`` is enough)."""
    listed = field_of(mapping(page, "the agent's operation page"), "events", list, "the page")
    return tuple(AgentEvent.from_json(event) for event in listed)


@dataclass(frozen=True)
class OperationPage:
    """``GET /v1/operations/{id}?after=``: the operation and its events after ``after``."""

    operation: AgentOperation
    events: tuple[AgentEvent, ...]
    last_seq: int

    @classmethod
    def from_json(cls, body: object) -> OperationPage:
        page = mapping(body, "the agent's operation page")
        return cls(
            operation=AgentOperation.from_json(page.get("operation")),
            events=read_events(page),
            last_seq=field_of(page, "last_seq", int, "the agent's operation page"),
        )


# -- revisions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentRevision:
    """A command line the agent ran (or was asked to), with how that start went."""

    id: int
    argv: tuple[str, ...]
    setting: HiCacheSetting
    became_ready: bool
    figures: StartFigures
    created_at: datetime
    finished_at: datetime | None
    actor: str

    @classmethod
    def from_json(cls, body: object) -> AgentRevision:
        rev = mapping(body, "a revision of the agent")
        rev_id = field_of(rev, "id", int, "a revision of the agent")
        where = f"the agent's revision {rev_id}"
        argv = texts(rev, "argv", where)
        if not argv:
            raise AgentError(f"{where}'s argv is empty or missing")
        hicache = mapping(rev.get("hicache"), f"{where}'s hicache")
        return cls(
            id=rev_id,
            argv=argv,
            setting=HiCacheSetting(
                enabled=bool(hicache.get("enabled")),
                ratio=number(hicache, "ratio", f"{where}'s hicache"),
                size_gb=optional(hicache, "size_gb", int, f"{where}'s hicache"),
                write_policy=optional(hicache, "write_policy", str, f"{where}'s hicache"),
                io_backend=optional(hicache, "io_backend", str, f"{where}'s hicache"),
            ),
            became_ready=field_of(rev, "became_ready", bool, where),
            figures=StartFigures.from_json(rev, where),
            created_at=instant(field_of(rev, "created_at", str, where), f"{where}'s created_at"),
            finished_at=optional_instant(rev, "finished_at", where),
            actor=field_of(rev, "actor", str, where),
        )


def read_revisions(answer: object) -> dict[int, AgentRevision]:
    """A ``GET /v1/revisions`` answer, by the agent's revision id."""
    listed: Sequence[Any] = field_of(
        mapping(answer, "the agent's revisions answer"), "revisions", list, "the answer"
    )
    revisions = (AgentRevision.from_json(raw) for raw in listed)
    return {revision.id: revision for revision in revisions}
