"""The one reader of a host agent's JSON answers: frozen values, each checked field by field.

The shapes are the agent's HTTP API (``bot.agent.http``). The bot core (``bot.chat``) and the
store's mapping (``bot.store.from_agent``) both read answers here, so a field means the same to
both and is checked once. An event, for instance::

    {"seq": 12, "at": "2026-03-02T09:14:05.120+00:00", "phase": "load_weights",
     "message": "loading weights 29/64 shards", "progress": 0.45, "data": {"shard": 29, ...}}
    -> AgentEvent(seq=12, at=datetime(...), phase=EventPhase.LOAD_WEIGHTS, ...)

A missing or ill-typed field, a time without its zone, or a state, phase or kind outside
:mod:`bot.vocab` raises :class:`~bot.errors.AgentError` naming the field: an agent of another
version, not a crash. Fields this kimi-ops does not know are kept (in ``raw``) and never
refused, so an agent that adds one (the token's name as ``caller``, say) is still read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    whole,
)
from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.prometheus import ServerMetrics
from bot.vocab import (
    FINAL_OPERATION_STATES,
    EventPhase,
    FailureKind,
    OperationKind,
    OperationState,
    ServerState,
)

__all__ = [
    "AgentEvent",
    "AgentFailure",
    "AgentOperation",
    "AgentPlan",
    "AgentRevision",
    "AgentStatus",
    "OperationPage",
    "PlannedChange",
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


# -- plans ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentPlan:
    """The planner's answer, as the agent sends it (GB = 1e9 bytes); a figure it could not work
    out is None, never 0."""

    verdict: Verdict
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
    raw: Json = field(repr=False, compare=False)

    @property
    def fits(self) -> bool:
        return self.verdict is Verdict.FITS

    @property
    def requested_setting(self) -> HiCacheSetting:
        """The HiCache setting the plan was asked for. A size that is not a whole number of GB
        (which SGLang's parser refuses: docs/sglang.md#flags) is left out; ``raw`` keeps the
        request as sent."""
        size = self.size_gb
        whole = int(size) if size is not None and size.is_integer() else None
        return HiCacheSetting(enabled=True, ratio=self.ratio, size_gb=whole)

    @classmethod
    def from_json(cls, body: object) -> AgentPlan:
        where = "the agent's plan"
        plan = mapping(body, where)
        request = mapping(field_of(plan, "request", Mapping, where), f"{where}'s request")
        return cls(
            verdict=enum_value(
                Verdict, field_of(plan, "verdict", str, where), f"{where}'s verdict"
            ),
            reason=field_of(plan, "reason", str, where),
            setting=str(plan.get("setting") or ""),
            ratio=number(request, "ratio", f"{where}'s request"),
            size_gb=number(request, "size_gb", f"{where}'s request"),
            ranks=field_of(plan, "ranks", int, where),
            per_rank_tokens=optional(plan, "per_rank_tokens", int, where),
            per_rank_gb=number(plan, "per_rank_gb", where),
            total_gb=number(plan, "total_gb", where),
            free_after_stop_gb=number(plan, "free_after_stop_gb", where),
            budget_gb=number(plan, "budget_gb", where),
            headroom_left_gb=number(plan, "headroom_left_gb", where),
            device_tokens=optional(plan, "device_tokens", int, where),
            host_tokens_before=optional(plan, "host_tokens_before", int, where),
            expected_startup_s=number(plan, "expected_startup_s", where),
            warnings=texts(plan, "warnings", where),
            raw=dict(plan),
        )


@dataclass(frozen=True)
class PlannedChange:
    """``POST /v1/plans``: the plan and the fingerprint of the facts it was made on."""

    plan: AgentPlan
    fingerprint: str

    @classmethod
    def from_json(cls, body: object) -> PlannedChange:
        answer = mapping(body, "the agent's plan answer")
        fingerprint = field_of(answer, "fingerprint", str, "the agent's plan answer")
        if not fingerprint:
            raise AgentError("the agent's plan answer has an empty 'fingerprint'")
        return cls(AgentPlan.from_json(answer.get("plan")), fingerprint)


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


# -- status -----------------------------------------------------------------------------------


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
    gpus: tuple[Json, ...]
    gpus_reason: str | None
    operation: AgentOperation | None
    fingerprint: str
    problems: tuple[str, ...]
    raw: Json = field(repr=False, compare=False)
    # The server's /metrics as figures; None from an agent that does not send them (older
    # than the field) or a server that serves none.
    metrics: ServerMetrics | None = None
    #: The server's URL as a fleet's router reaches it (``[agent] router_url``, else its own
    #: URL); None from agents older than this field.
    router_url: str | None = None

    @classmethod
    def from_json(cls, body: object) -> AgentStatus:
        where = "the agent's status"
        status = mapping(body, where)
        host = mapping(field_of(status, "host", Mapping, where), f"{where}'s host")
        server = mapping(field_of(status, "server", Mapping, where), f"{where}'s server")
        config = mapping(status.get("config") or {}, f"{where}'s config")
        capacity = mapping(status.get("capacity") or {}, f"{where}'s capacity")
        ram = mapping(status.get("ram") or {}, f"{where}'s ram")
        gpus = mapping(status.get("gpus") or {}, f"{where}'s gpus")
        operation = status.get("operation")
        enabled = config.get("enable_hierarchical_cache")
        hicache = None
        if enabled is not None:
            hicache = HiCacheSetting(
                enabled=bool(enabled),
                ratio=number(config, "hicache_ratio", f"{where}'s config"),
                size_gb=whole(config, "hicache_size", f"{where}'s config"),
                write_policy=optional(config, "hicache_write_policy", str, f"{where}'s config"),
                io_backend=optional(config, "hicache_io_backend", str, f"{where}'s config"),
            )
        devices = optional(gpus, "devices", list, f"{where}'s gpus") or []
        return cls(
            host=field_of(host, "name", str, f"{where}'s host"),
            server_state=enum_value(
                ServerState, field_of(server, "state", str, f"{where}'s server"), "server state"
            ),
            health_code=optional(server, "health_code", int, f"{where}'s server"),
            version=optional(server, "version", str, f"{where}'s server"),
            uptime_s=number(server, "uptime_s", f"{where}'s server"),
            hicache=hicache,
            effective=optional(config, "effective", str, f"{where}'s config"),
            device_tokens=whole(capacity, "device_tokens", f"{where}'s capacity"),
            host_tokens_per_rank=whole(capacity, "host_tokens_per_rank", f"{where}'s capacity"),
            host_gb_per_rank=number(capacity, "host_gb_per_rank", f"{where}'s capacity"),
            ranks=whole(capacity, "ranks", f"{where}'s capacity"),
            ram_total_gb=number(ram, "total_gb", f"{where}'s ram"),
            ram_available_gb=number(ram, "available_gb", f"{where}'s ram"),
            ram_server_held_gb=number(ram, "server_held_gb", f"{where}'s ram"),
            gpus=tuple(mapping(gpu, f"{where}'s gpu") for gpu in devices),
            gpus_reason=optional(gpus, "reason", str, f"{where}'s gpus"),
            operation=None if not operation else AgentOperation.from_json(operation),
            fingerprint=str(status.get("fingerprint") or ""),
            problems=texts(status, "problems", where),
            raw=dict(status),
            metrics=_metrics(status.get("metrics"), f"{where}'s metrics"),
            router_url=optional(server, "router_url", str, f"{where}'s server"),
        )


def _metrics(body: object, where: str) -> ServerMetrics | None:
    """``{"token_usage": 0.42, "running_requests": 3, "queued_requests": 0, "cache_hit_rate":
    0.31, "host_total_tokens": null}``; fractions must lie in 0..1, counts be whole."""
    if body is None:
        return None
    figures = mapping(body, where)
    fractions = {key: number(figures, key, where) for key in ("token_usage", "cache_hit_rate")}
    for key, value in fractions.items():
        if value is not None and not 0.0 <= value <= 1.0:
            raise AgentError(f"{where}'s {key!r} is {value!r}, not a fraction between 0 and 1")
    counts = {
        key: whole(figures, key, where)
        for key in ("running_requests", "queued_requests", "host_total_tokens")
    }
    for key, count in counts.items():
        if count is not None and count < 0:
            raise AgentError(f"{where}'s {key!r} is {count!r}, not a count")
    return ServerMetrics(
        token_usage=fractions["token_usage"],
        running_requests=counts["running_requests"],
        queued_requests=counts["queued_requests"],
        cache_hit_rate=fractions["cache_hit_rate"],
        host_total_tokens=counts["host_total_tokens"],
    )
