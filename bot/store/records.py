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

from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.vocab import (
    EventPhase,
    FailureKind,
    OperationKind,
    OperationState,
    ReplicaPhase,
    RolloutState,
)

__all__ = [
    "FINAL_OUTCOMES",
    "CapacitySample",
    "FleetProposalRecord",
    "FleetReplicaProposal",
    "OperationRecord",
    "PlanSummary",
    "ProposalRecord",
    "RefusalRecord",
    "ReportSchedule",
    "RevisionKind",
    "RevisionOutcome",
    "RevisionRecord",
    "RolloutRecord",
    "RolloutReplicaRecord",
    "SchedulerLease",
    "StoredEvent",
]


class RevisionOutcome(StrEnum):
    """Where a revision (one configuration someone asked for) ended up: the audit's own list.

    Defined here, not in :mod:`bot.vocab`: the agent's revisions record one start each
    (pending, ready, failed), while an audited revision also lives through Slack before any start
    (proposed, cancelled, expired, refused) and can be undone later (rolled_back).
    """

    PROPOSED = "proposed"  # shown in Slack with Apply/Cancel, nobody clicked yet
    CANCELLED = "cancelled"  # someone clicked Cancel
    EXPIRED = "expired"  # the proposal timed out or another operation made it void
    REFUSED = "refused"  # the planner or the apply-time re-check said it does not fit
    APPLIED = "applied"  # the agent accepted it; the server is restarting
    READY = "ready"  # the running server reports the new settings
    FAILED = "failed"  # the start failed (see failure_kind / failure_lines)
    ROLLED_BACK = "rolled_back"  # a later revision returned the host to an earlier config
    UNCHANGED = "unchanged"  # a fleet's replica the rollout left as it was (nothing ran)


class RevisionKind(StrEnum):
    """What a revision does to its host: the audit tells a restart and a rollback from a change."""

    CHANGE = "change"  # a new configuration (a resize, or storage flags then a restart)
    LIVE = "live"  # a new configuration made through SGLang's runtime API, no restart
    RESTART = "restart"  # the same configuration started again
    ROLLBACK = "rollback"  # a return to an earlier configuration (``returned_to``)


# Outcomes after which a revision's figures no longer change (``finished_at`` is set).
FINAL_OUTCOMES: frozenset[RevisionOutcome] = frozenset(
    {
        RevisionOutcome.CANCELLED,
        RevisionOutcome.EXPIRED,
        RevisionOutcome.REFUSED,
        RevisionOutcome.READY,
        RevisionOutcome.FAILED,
        RevisionOutcome.ROLLED_BACK,
        RevisionOutcome.UNCHANGED,
    }
)


@dataclass(frozen=True)
class PlanSummary:
    """The planner's figures at proposal time: the key numbers as columns, the whole plan as JSON.

    A figure the planner could not work out is None, never 0 (a ratio refused for want of the
    device pool's size has no GB; a size without a known KV size per token has no token count).
    ``detail`` is the full Plan as a JSON-able mapping (finite numbers, strings, lists, dicts).
    """

    per_rank_gb: float | None
    total_gb: float | None
    per_rank_tokens: int | None
    verdict: Verdict
    reason: str
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RevisionRecord:
    """One configuration asked for on one host, from proposal to its outcome: the audit row.

    ``settings`` are the HiCache flags as written: a size wins over a ratio, as in SGLang
    (docs/sglang.md#host-pool-sizing), and both are kept so the audit shows exactly what ran.
    ``command_line`` is the whole argv the agent wrote for it (empty when the revision never
    reached an agent). ``agent_revision_id`` and ``agent_returned_to`` are the host agent's own
    revision ids (None when not recorded).
    """

    id: int
    host: str
    settings: HiCacheSetting
    command_line: tuple[str, ...]
    plan: PlanSummary
    proposed_by: str | None
    applied_by: str | None
    proposed_at: datetime
    applied_at: datetime | None
    finished_at: datetime | None
    outcome: RevisionOutcome
    startup_seconds: float | None
    device_tokens: int | None
    host_gb_per_rank: float | None
    host_tokens_per_rank: int | None
    failure_kind: FailureKind | None
    failure_lines: tuple[str, ...]
    rollback_of: int | None
    returned_to: int | None
    agent_revision_id: int | None
    agent_returned_to: int | None
    kind: RevisionKind = RevisionKind.CHANGE


@dataclass(frozen=True)
class FleetReplicaProposal:
    """One replica's part of a fleet proposal, as :meth:`Store.record_fleet_proposal` takes it:
    the setting asked for and the planner's figures on that host."""

    host: str
    settings: HiCacheSetting
    plan: PlanSummary
    fingerprint: str
    requested: Mapping[str, Any] = field(default_factory=dict)
    command_line: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetProposalRecord:
    """One proposal over a whole fleet: the proposal (one id) and each replica's revision."""

    proposal: ProposalRecord
    revisions: Mapping[str, int]  # host -> its revision id, in the order given


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
    """An operation run by an agent (resize, restart, rollback) and the Slack message showing it.

    ``agent_operation_id`` is the agent's own id for it (``GET /v1/operations/{id}``);
    ``caller`` the name of the agent token that started it (None when the token had none).
    """

    id: int
    agent_operation_id: int
    host: str
    kind: OperationKind
    state: OperationState
    channel: str | None
    message_ts: str | None
    revision_id: int | None
    last_event_seq: int
    started_at: datetime
    finished_at: datetime | None
    caller: str | None = None


@dataclass(frozen=True)
class StoredEvent:
    """The store's copy of one progress event of an operation, as the agent published it
    (``seq`` counts from 1; ``at`` is a datetime here, the agent's JSON has ISO text)."""

    seq: int
    at: datetime
    phase: EventPhase
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
class SchedulerLease:
    """Which bot process runs the report scheduler on this database, and when it last said so."""

    name: str
    owner: str
    acquired_at: datetime
    heartbeat_at: datetime


@dataclass(frozen=True)
class RolloutReplicaRecord:
    """One replica's line of a rollout: where it stands, and the agent operation and revision
    its change produced (``revision`` is the agent's id; the store's own revision of that host
    is found by ``(host, agent_revision_id)``)."""

    host: str
    url: str
    phase: ReplicaPhase = ReplicaPhase.WAITING
    planned: str | None = None
    proposal_id: int | None = None
    operation_id: int | None = None
    revision: int | None = None
    old_config: str | None = None
    new_config: str | None = None
    detail: str | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class RolloutRecord:
    """One rollout over a fleet: the audit record that links every replica's revision."""

    id: int
    fleet: str
    kind: OperationKind
    change: str  # "hicache ratio 4", "restart", "rollback"
    ratio: float | None
    size_gb: int | None
    proposed_by: str
    applied_by: str | None
    state: RolloutState
    reason: str | None
    channel: str | None
    message_ts: str | None
    created_at: datetime
    expires_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    replicas: tuple[RolloutReplicaRecord, ...]
