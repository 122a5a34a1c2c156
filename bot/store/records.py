"""The values that cross the store's boundary: frozen dataclasses in, frozen dataclasses out.

No ORM object leaves :mod:`bot.store`; callers build these (or pass plain arguments) and get these
back, so the bot, the scheduler and the CLI never hold a session or a lazy attribute.
Every ``datetime`` is timezone-aware UTC; a naive one is refused on the way in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "FINAL_OUTCOMES",
    "CapacitySample",
    "HiCacheSettings",
    "OperationEvent",
    "OperationRecord",
    "Outcome",
    "PlanSummary",
    "ProposalRecord",
    "RefusalRecord",
    "ReportSchedule",
    "RevisionRecord",
    "StartupDuration",
]


class Outcome(StrEnum):
    """Where a revision (one configuration someone asked for) ended up."""

    PROPOSED = "proposed"  # shown in Slack with Apply/Cancel, nobody clicked yet
    CANCELLED = "cancelled"  # someone clicked Cancel
    EXPIRED = "expired"  # the proposal timed out or another operation made it void
    REFUSED = "refused"  # the planner or the apply-time re-check said it does not fit
    APPLIED = "applied"  # the agent accepted it; the server is restarting
    READY = "ready"  # the running server reports the new settings
    FAILED = "failed"  # the start failed (see failure_kind / failure_lines)
    ROLLED_BACK = "rolled_back"  # a later revision returned the host to an earlier config


# Outcomes after which a revision's figures no longer change (``finished_at`` is set).
FINAL_OUTCOMES: frozenset[Outcome] = frozenset(
    {Outcome.CANCELLED, Outcome.EXPIRED, Outcome.REFUSED, Outcome.READY, Outcome.FAILED}
    | {Outcome.ROLLED_BACK}
)


@dataclass(frozen=True)
class HiCacheSettings:
    """The HiCache part of a server configuration, and the whole command line it came from.

    ``size_gb`` (whole GB = 1e9 bytes per rank) wins over ``ratio`` when both are set, as in
    SGLang; both are kept as written so the audit shows exactly what ran.
    """

    enabled: bool
    ratio: float | None = None
    size_gb: int | None = None
    write_policy: str | None = None
    io_backend: str | None = None
    command_line: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanSummary:
    """The planner's figures at proposal time: the key numbers as columns, the whole plan as JSON.

    ``detail`` is the full Plan as a JSON-able mapping (finite numbers, strings, lists, dicts).
    """

    per_rank_gb: float
    total_gb: float
    per_rank_tokens: int
    verdict: str
    reason: str
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RevisionRecord:
    """One configuration asked for on one host, from proposal to its outcome: the audit row."""

    id: int
    host: str
    settings: HiCacheSettings
    plan: PlanSummary
    proposed_by: str | None
    applied_by: str | None
    proposed_at: datetime
    applied_at: datetime | None
    finished_at: datetime | None
    outcome: Outcome
    startup_seconds: float | None
    device_tokens: int | None
    host_gb_per_rank: float | None
    host_tokens_per_rank: int | None
    failure_kind: str | None
    failure_lines: tuple[str, ...]
    rollback_of: int | None
    returned_to: int | None


@dataclass(frozen=True)
class ProposalRecord:
    """The Slack side of a proposed revision: where it was posted and until when it may apply."""

    id: int
    revision_id: int
    channel: str
    message_ts: str | None
    expires_at: datetime
    fingerprint: str
    requested: Mapping[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class OperationRecord:
    """An operation run by an agent (resize, restart, rollback) and the Slack message showing it."""

    id: int
    agent_operation_id: str
    host: str
    kind: str
    state: str
    channel: str | None
    message_ts: str | None
    revision_id: int | None
    last_event_seq: int
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class OperationEvent:
    """One progress event of an operation, as the agent published it (``seq`` counts from 1)."""

    seq: int
    at: datetime
    phase: str
    message: str
    progress: float | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RefusalRecord:
    """Something kimi-ops refused: who asked, what, and why (unauthorized users included)."""

    id: int
    at: datetime
    user_id: str
    action: str
    reason: str
    host: str | None
    channel: str | None
    revision_id: int | None


@dataclass(frozen=True)
class CapacitySample:
    """One point of a host's capacity time series; ``None`` where the server did not say.

    Bytes are bytes; ``token_usage`` and ``cache_hit_rate`` are fractions (0..1); ``gpus`` holds
    per-GPU figures as the bot received them (for example ``{"index": 0, "used_bytes": ...}``).
    """

    host: str
    at: datetime
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    hicache_host_bytes: int | None = None
    device_tokens: int | None = None
    host_tokens: int | None = None
    token_usage: float | None = None
    queued_requests: int | None = None
    running_requests: int | None = None
    cache_hit_rate: float | None = None
    gpus: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class ReportSchedule:
    """A capacity report posted to ``channel`` on a cadence (``host`` None: every host)."""

    id: int
    channel: str
    host: str | None
    cadence: str
    next_run_at: datetime
    created_by: str
    created_at: datetime
    enabled: bool


@dataclass(frozen=True)
class StartupDuration:
    """How long one start of a host took to become ready, and the host pool per rank it pinned.

    ``host_gb_per_rank`` is the size reached (from the log) when known, else the planned one.
    """

    revision_id: int
    finished_at: datetime
    seconds: float
    host_gb_per_rank: float
