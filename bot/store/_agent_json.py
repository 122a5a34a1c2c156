"""Reading a host agent's JSON answers into frozen values, before anything is written.

The shapes are the agent's HTTP API (``bot/agent/_views.py``): an operation page
``{"operation": {...}, "events": [...], "state", "last_seq"}``, a plan answer
``{"plan": {...}, "fingerprint"}`` and the revisions list ``{"revisions": [...]}``. A missing or
ill-typed field raises :class:`~bot.errors.AgentError` naming it: the answer is not one this
kimi-ops can use, and nothing is recorded from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.store.records import PlanSummary, StoredEvent
from bot.vocab import EventPhase, FailureKind, OperationKind, OperationState

__all__ = [
    "AgentFailure",
    "AgentOperation",
    "AgentRevision",
    "StartFigures",
    "read_events",
    "read_operation",
    "read_plan",
    "read_requested_setting",
    "read_revisions",
    "start_figures",
]

_T = TypeVar("_T")


@dataclass(frozen=True)
class StartFigures:
    """What one start logged: its seconds to ready, the device pool's tokens and the host pool
    per rank in GB (1e9) and tokens. None where the start did not get that far."""

    startup_seconds: float | None = None
    device_tokens: int | None = None
    host_gb_per_rank: float | None = None
    host_tokens_per_rank: int | None = None

    def as_outcome_figures(self) -> dict[str, Any]:
        """The keyword arguments :meth:`Store.record_outcome` takes for these figures."""
        return {
            "startup_seconds": self.startup_seconds,
            "device_tokens": self.device_tokens,
            "host_gb_per_rank": self.host_gb_per_rank,
            "host_tokens_per_rank": self.host_tokens_per_rank,
        }


@dataclass(frozen=True)
class AgentFailure:
    """Why a start failed, as the agent decided: its kind and SGLang's decisive log lines."""

    kind: FailureKind
    lines: tuple[str, ...]
    figures: StartFigures


@dataclass(frozen=True)
class AgentOperation:
    """One operation as the agent reports it; ``revision`` is the agent's revision it started."""

    id: int
    kind: OperationKind
    state: OperationState
    actor: str
    created_at: datetime
    finished_at: datetime | None
    revision: int | None
    plan: PlanSummary | None
    failure: AgentFailure | None
    #: The name of the agent token that started it (absent from older agents' answers).
    caller: str | None = None


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


def _get(data: Mapping[str, Any], key: str, kind: type[_T] | tuple[type, ...], where: str) -> _T:
    if key not in data:
        raise AgentError(f"{where} has no {key!r} (keys: {', '.join(sorted(data)) or 'none'})")
    value = data[key]
    # JSON has one number type: an integer-valued field must not be a bool or a float.
    wrong_number = isinstance(value, bool) and kind is not bool
    if wrong_number or not isinstance(value, kind):
        raise AgentError(f"{where}'s {key!r} is {value!r}, not what the agent's API sends")
    return value  # type: ignore[return-value]


def _optional(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    return None if data.get(key) is None else _get(data, key, kind, where)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise AgentError(f"{where} is {type(value).__name__}, not a JSON object")
    return value


def _enum(kind: type[_T], value: object, where: str) -> _T:
    try:
        return kind(value)  # type: ignore[call-arg]
    except ValueError:
        raise AgentError(f"{where} {value!r} is not one kimi-ops knows") from None


def _instant(value: object, where: str) -> datetime:
    try:
        instant = datetime.fromisoformat(str(value))
    except ValueError:
        raise AgentError(f"{where} {value!r} is not an ISO 8601 time") from None
    if instant.tzinfo is None:
        raise AgentError(f"{where} {value!r} has no time zone; the agent sends UTC offsets")
    return instant


def _number(data: Mapping[str, Any], key: str, where: str) -> float | None:
    value = _optional(data, key, (int, float), where)
    if value is not None and not math.isfinite(value):
        raise AgentError(f"{where}'s {key!r} is {value!r}, not a finite number")
    return None if value is None else float(value)


def start_figures(data: Mapping[str, Any], where: str = "the agent's event data") -> StartFigures:
    """The figures a start logged, from a ``ready`` / ``rolled_back`` event's data or a failure.

    >>> start_figures({"startup_s": 1.42, "device_tokens": 200000, "host_gb_per_rank": 12.0,
    ...                "host_tokens_per_rank": 341531}).host_tokens_per_rank
    341531
    """
    return StartFigures(
        startup_seconds=_number(data, "startup_s", where),
        device_tokens=_optional(data, "device_tokens", int, where),
        host_gb_per_rank=_number(data, "host_gb_per_rank", where),
        host_tokens_per_rank=_optional(data, "host_tokens_per_rank", int, where),
    )


def _failure(value: object, where: str) -> AgentFailure | None:
    if value is None:
        return None
    data = _mapping(value, where)
    lines = _get(data, "lines", list, where)
    if not all(isinstance(line, str) for line in lines):
        raise AgentError(f"{where}'s 'lines' holds something other than text")
    return AgentFailure(
        kind=_enum(FailureKind, _get(data, "kind", str, where), f"{where}'s kind"),
        lines=tuple(lines),
        figures=start_figures(data, where),
    )


def read_plan(answer: Mapping[str, Any]) -> PlanSummary:
    """A ``/v1/plans`` answer (or a 422 body carrying ``plan``) as the store's summary, with the
    planner's real figures and verdict: a figure it could not work out stays None."""
    plan = _mapping(_mapping(answer, "the agent's plan answer").get("plan"), "the agent's plan")
    where = "the agent's plan"
    tokens = _optional(plan, "per_rank_tokens", int, where)
    return PlanSummary(
        per_rank_gb=_number(plan, "per_rank_gb", where),
        total_gb=_number(plan, "total_gb", where),
        per_rank_tokens=tokens,
        verdict=_enum(Verdict, _get(plan, "verdict", str, where), f"{where}'s verdict"),
        reason=_get(plan, "reason", str, where),
        detail=dict(plan),
    )


def read_requested_setting(answer: Mapping[str, Any]) -> HiCacheSetting:
    """The HiCache setting a plan was asked for. A size that is not a whole number of GB (which
    SGLang's parser refuses: docs/sglang.md#flags) is left out here; the plan's detail keeps the
    request as sent."""
    plan = _mapping(_mapping(answer, "the agent's plan answer").get("plan"), "the agent's plan")
    request = _mapping(plan.get("request"), "the agent's plan request")
    ratio = _number(request, "ratio", "the agent's plan request")
    size = _number(request, "size_gb", "the agent's plan request")
    size_gb = int(size) if size is not None and size.is_integer() else None
    return HiCacheSetting(enabled=True, ratio=ratio, size_gb=size_gb)


def read_operation(page: Mapping[str, Any]) -> AgentOperation:
    """The operation of a ``GET /v1/operations/{id}`` page."""
    op = _mapping(_mapping(page, "the agent's operation page").get("operation"), "the operation")
    op_id = _get(op, "id", int, "the agent's operation")
    where = f"the agent's operation {op_id}"
    plan = op.get("plan")
    finished = op.get("finished_at")
    return AgentOperation(
        id=op_id,
        kind=_enum(OperationKind, _get(op, "kind", str, where), f"{where}'s kind"),
        state=_enum(OperationState, _get(op, "state", str, where), f"{where}'s state"),
        actor=_get(op, "actor", str, where),
        created_at=_instant(_get(op, "created_at", str, where), f"{where}'s created_at"),
        finished_at=None if finished is None else _instant(finished, f"{where}'s finished_at"),
        revision=_optional(op, "revision", int, where),
        plan=None if plan is None else read_plan({"plan": plan}),
        failure=_failure(op.get("failure"), f"{where}'s failure"),
        caller=_optional(op, "caller", str, where),
    )


def read_events(page: Mapping[str, Any]) -> list[StoredEvent]:
    """The events of a ``GET /v1/operations/{id}`` page, as the store keeps them."""
    events = _get(_mapping(page, "the agent's operation page"), "events", list, "the page")
    out: list[StoredEvent] = []
    for raw in events:
        event = _mapping(raw, "an event of the agent's operation")
        seq = _get(event, "seq", int, "an event of the agent's operation")
        where = f"the agent's event {seq}"
        out.append(
            StoredEvent(
                seq=seq,
                at=_instant(_get(event, "at", str, where), f"{where}'s time"),
                phase=_enum(EventPhase, _get(event, "phase", str, where), f"{where}'s phase"),
                message=_get(event, "message", str, where),
                progress=_number(event, "progress", where),
                data=_mapping(event.get("data", {}), f"{where}'s data"),
            )
        )
    return out


def read_revisions(answer: Mapping[str, Any]) -> dict[int, AgentRevision]:
    """A ``GET /v1/revisions`` answer, by the agent's revision id."""
    listed: Sequence[Any] = _get(
        _mapping(answer, "the agent's revisions answer"), "revisions", list, "the answer"
    )
    out: dict[int, AgentRevision] = {}
    for raw in listed:
        rev = _mapping(raw, "a revision of the agent")
        rev_id = _get(rev, "id", int, "a revision of the agent")
        where = f"the agent's revision {rev_id}"
        argv = _get(rev, "argv", list, where)
        if not argv or not all(isinstance(arg, str) for arg in argv):
            raise AgentError(f"{where}'s argv is not a list of strings: {argv!r}")
        hicache = _mapping(rev.get("hicache"), f"{where}'s hicache")
        finished = rev.get("finished_at")
        out[rev_id] = AgentRevision(
            id=rev_id,
            argv=tuple(argv),
            setting=HiCacheSetting(
                enabled=bool(hicache.get("enabled")),
                ratio=_number(hicache, "ratio", f"{where}'s hicache"),
                size_gb=_optional(hicache, "size_gb", int, f"{where}'s hicache"),
                write_policy=_optional(hicache, "write_policy", str, f"{where}'s hicache"),
                io_backend=_optional(hicache, "io_backend", str, f"{where}'s hicache"),
            ),
            became_ready=_get(rev, "became_ready", bool, where),
            figures=start_figures(rev, where),
            created_at=_instant(_get(rev, "created_at", str, where), f"{where}'s created_at"),
            finished_at=None if finished is None else _instant(finished, f"{where}'s finished_at"),
            actor=_get(rev, "actor", str, where),
        )
    return out
