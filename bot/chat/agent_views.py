"""What the bot reads from an agent's answers: frozen values parsed from its JSON.

Only the fields the bot uses are typed; each value keeps the JSON it came from (``raw``) for the
audit. A body that lacks a field the bot needs, or holds a state or phase outside
:mod:`bot.vocab`, is an :class:`~bot.errors.AgentError` naming the field: an agent of another
version, not a crash. For instance an event::

    {"seq": 12, "at": "2026-03-02T09:14:05.120+00:00", "phase": "load_weights",
     "message": "loading weights 29/64 shards", "progress": 0.45, "data": {"shard": 29, ...}}
    -> AgentEvent(seq=12, at=datetime(...), phase=EventPhase.LOAD_WEIGHTS, ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationKind, OperationState, ServerState

__all__ = [
    "AgentEvent",
    "AgentOperation",
    "AgentPlan",
    "AgentStatus",
    "OperationPage",
    "PlannedChange",
]

_E = TypeVar("_E", bound=StrEnum)
_Json = Mapping[str, Any]


def _need(body: _Json, key: str, what: str) -> Any:
    if not isinstance(body, Mapping) or key not in body:
        raise AgentError(f"the agent's {what} has no {key!r}; is it another kimi-ops version?")
    return body[key]


def _enum(kind: type[_E], value: object, what: str) -> _E:
    try:
        return kind(str(value))
    except ValueError as exc:
        raise AgentError(f"the agent's {what} {value!r} is not one kimi-ops knows") from exc


def _time(value: object, what: str) -> datetime:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise AgentError(f"the agent's {what} {value!r} is not an ISO time") from exc


def _opt_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


@dataclass(frozen=True)
class AgentPlan:
    """The planner's answer, as the agent sends it (GB = 1e9 bytes)."""

    fits: bool
    reason: str
    setting: str
    ratio: float | None
    size_gb: float | None
    ranks: int
    per_rank_tokens: int | None
    per_rank_gb: float | None
    total_gb: float | None
    free_after_stop_gb: float | None
    budget_gb: float | None
    headroom_left_gb: float | None
    device_tokens: int | None
    host_tokens_before: int | None
    expected_startup_s: float | None
    warnings: tuple[str, ...]
    raw: _Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: _Json) -> AgentPlan:
        request = _need(body, "request", "plan")
        return cls(
            fits=_need(body, "verdict", "plan") == "fits",
            reason=str(_need(body, "reason", "plan")),
            setting=str(body.get("setting", "")),
            ratio=_opt_float(request.get("ratio")),
            size_gb=_opt_float(request.get("size_gb")),
            ranks=int(_need(body, "ranks", "plan")),
            per_rank_tokens=_opt_int(body.get("per_rank_tokens")),
            per_rank_gb=_opt_float(body.get("per_rank_gb")),
            total_gb=_opt_float(body.get("total_gb")),
            free_after_stop_gb=_opt_float(body.get("free_after_stop_gb")),
            budget_gb=_opt_float(body.get("budget_gb")),
            headroom_left_gb=_opt_float(body.get("headroom_left_gb")),
            device_tokens=_opt_int(body.get("device_tokens")),
            host_tokens_before=_opt_int(body.get("host_tokens_before")),
            expected_startup_s=_opt_float(body.get("expected_startup_s")),
            warnings=tuple(str(w) for w in body.get("warnings", ())),
            raw=dict(body),
        )


@dataclass(frozen=True)
class PlannedChange:
    """``POST /v1/plans``: the plan and the fingerprint of the facts it was made on."""

    plan: AgentPlan
    fingerprint: str


@dataclass(frozen=True)
class AgentOperation:
    """One operation as the agent reports it."""

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
    failure: _Json | None
    raw: _Json = field(repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.state in FINAL_OPERATION_STATES

    @classmethod
    def from_json(cls, body: _Json) -> AgentOperation:
        plan = body.get("plan")
        finished = body.get("finished_at")
        return cls(
            id=int(_need(body, "id", "operation")),
            kind=_enum(OperationKind, _need(body, "kind", "operation"), "operation kind"),
            state=_enum(OperationState, _need(body, "state", "operation"), "operation state"),
            actor=str(body.get("actor", "")),
            created_at=_time(_need(body, "created_at", "operation"), "created_at"),
            finished_at=None if finished is None else _time(finished, "finished_at"),
            plan=None if not plan else AgentPlan.from_json(plan),
            revision=_opt_int(body.get("revision")),
            rollback_of=_opt_int(body.get("rollback_of")),
            outcome=body.get("outcome"),
            failure=body.get("failure"),
            raw=dict(body),
        )


@dataclass(frozen=True)
class AgentEvent:
    """One step of an operation; ``seq`` counts 1, 2, 3 ... without gaps."""

    seq: int
    at: datetime
    phase: EventPhase
    message: str
    progress: float
    data: _Json = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: _Json) -> AgentEvent:
        return cls(
            seq=int(_need(body, "seq", "event")),
            at=_time(_need(body, "at", "event"), "event time"),
            phase=_enum(EventPhase, _need(body, "phase", "event"), "event phase"),
            message=str(body.get("message", "")),
            progress=float(body.get("progress") or 0.0),
            data=dict(body.get("data") or {}),
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


@dataclass(frozen=True)
class OperationPage:
    """``GET /v1/operations/{id}?after=``: the operation and its events after ``after``."""

    operation: AgentOperation
    events: tuple[AgentEvent, ...]
    last_seq: int


@dataclass(frozen=True)
class AgentStatus:
    """``GET /v1/status``: the figures ``status`` shows."""

    host: str
    server_state: ServerState
    health_code: int | None
    version: str | None
    uptime_s: float | None
    hicache: HiCacheSetting | None
    effective: str | None
    device_tokens: int | None
    host_tokens_per_rank: int | None
    host_gb_per_rank: float | None
    ranks: int | None
    ram_total_gb: float | None
    ram_available_gb: float | None
    ram_server_held_gb: float | None
    gpus: tuple[_Json, ...]
    gpus_reason: str | None
    operation: AgentOperation | None
    fingerprint: str
    problems: tuple[str, ...]
    raw: _Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: _Json) -> AgentStatus:
        host = _need(body, "host", "status")
        server = _need(body, "server", "status")
        config = body.get("config") or {}
        capacity = body.get("capacity") or {}
        ram = body.get("ram") or {}
        gpus = body.get("gpus") or {}
        operation = body.get("operation")
        enabled = config.get("enable_hierarchical_cache")
        hicache = (
            None
            if enabled is None
            else HiCacheSetting(
                enabled=bool(enabled),
                ratio=_opt_float(config.get("hicache_ratio")),
                size_gb=_opt_int(config.get("hicache_size")),
                write_policy=config.get("hicache_write_policy"),
                io_backend=config.get("hicache_io_backend"),
            )
        )
        return cls(
            host=str(_need(host, "name", "status host")),
            server_state=_enum(ServerState, _need(server, "state", "status"), "server state"),
            health_code=_opt_int(server.get("health_code")),
            version=server.get("version"),
            uptime_s=_opt_float(server.get("uptime_s")),
            hicache=hicache,
            effective=config.get("effective"),
            device_tokens=_opt_int(capacity.get("device_tokens")),
            host_tokens_per_rank=_opt_int(capacity.get("host_tokens_per_rank")),
            host_gb_per_rank=_opt_float(capacity.get("host_gb_per_rank")),
            ranks=_opt_int(capacity.get("ranks")),
            ram_total_gb=_opt_float(ram.get("total_gb")),
            ram_available_gb=_opt_float(ram.get("available_gb")),
            ram_server_held_gb=_opt_float(ram.get("server_held_gb")),
            gpus=tuple(gpus.get("devices") or ()),
            gpus_reason=gpus.get("reason"),
            operation=None if not operation else AgentOperation.from_json(operation),
            fingerprint=str(body.get("fingerprint") or ""),
            problems=tuple(str(p) for p in body.get("problems") or ()),
            raw=dict(body),
        )
