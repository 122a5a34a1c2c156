"""What clients see of the agent's state: operations, their events and revisions.

Frozen values with ``to_dict()`` giving the HTTP API's JSON, e.g. an event::

    {"seq": 12, "at": "2026-03-02T09:14:05.120+00:00", "phase": "load_weights",
     "message": "loading weights 29/64 shards", "progress": 0.45, "data": {"shard": 29, ...}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.agent.cmdline import redact_secrets
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationKind, OperationState

__all__ = ["OperationView", "ProgressEvent", "RevisionOutcome", "RevisionView"]


class RevisionOutcome(StrEnum):
    """How the start of a revision (a command line this host ran) went."""

    PENDING = "pending"  # recorded, not started or not finished yet
    READY = "ready"  # it came up and served the applied setting
    FAILED = "failed"  # it did not come up
    UNKNOWN = "unknown"  # found running without an answer from /health


@dataclass(frozen=True)
class OperationView:
    """One operation as clients see it (``to_dict()`` is the JSON of the HTTP API)."""

    id: int
    kind: OperationKind
    state: OperationState
    actor: str
    created_at: str
    finished_at: str | None
    request: Mapping[str, Any]
    plan: Mapping[str, Any] | None
    revision: int | None
    rollback_of: int | None
    outcome: str | None
    failure: Mapping[str, Any] | None
    #: The name of the token that started it (``NAME:TOKEN``); None for an unnamed token.
    caller: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL_OPERATION_STATES

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "state": self.state.value,
            "actor": self.actor,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "request": dict(self.request),
            "plan": None if self.plan is None else dict(self.plan),
            "revision": self.revision,
            "rollback_of": self.rollback_of,
            "outcome": self.outcome,
            "failure": None if self.failure is None else dict(self.failure),
            "caller": self.caller,
        }


@dataclass(frozen=True)
class ProgressEvent:
    """One step of an operation as the agent reports its progress: ``seq`` counts 1, 2, 3 ...
    per operation without gaps."""

    seq: int
    at: str
    phase: EventPhase
    message: str
    progress: float
    data: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "phase": self.phase.value,
            "message": self.message,
            "progress": self.progress,
            "data": dict(self.data),
        }


@dataclass(frozen=True)
class RevisionView:
    """A command line this host ran (or was asked to), with how that start went."""

    id: int
    argv: tuple[str, ...]
    hicache: Mapping[str, Any]
    outcome: RevisionOutcome
    became_ready: bool
    startup_s: float | None
    device_tokens: int | None
    kv_bytes_per_token: float | None
    host_gb_per_rank: float | None
    host_tokens_per_rank: int | None
    created_at: str
    finished_at: str | None
    actor: str
    kind: str
    rollback_of: int | None
    operation_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "argv": redact_secrets(self.argv),
            "hicache": dict(self.hicache),
            "outcome": self.outcome.value,
            "became_ready": self.became_ready,
            "startup_s": self.startup_s,
            "device_tokens": self.device_tokens,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "host_gb_per_rank": self.host_gb_per_rank,
            "host_tokens_per_rank": self.host_tokens_per_rank,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "actor": self.actor,
            "kind": self.kind,
            "rollback_of": self.rollback_of,
            "operation_id": self.operation_id,
        }
