"""The audit seam: what the core keeps on record and reads back, as a Protocol.

The core calls only :class:`Audit`; :class:`bot.chat.store_audit.StoreAudit` implements it over
the store, recording what agents answered through the store's one mapping
(:mod:`bot.store.from_agent`).

Exactly one apply of a proposal wins: :meth:`Audit.claim_apply` moves the proposal from open to
applied in one write transaction, and only the caller whose claim is the one recorded (same
person, same instant) goes on to start the operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from bot.agent_json import AgentEvent, AgentOperation, PlannedChange
from bot.chat.policy import ProposalTerms, Refusal
from bot.chat.progress import ProgressView
from bot.hicache import HiCacheSetting

__all__ = ["Audit", "HistoryEntry", "RollbackTarget", "Watch"]


@dataclass(frozen=True)
class Watch:
    """An operation the bot watches: where it runs, who is involved, and the last seq stored."""

    host: str
    operation_id: int
    title: str
    proposed_by: str | None
    applied_by: str | None
    last_seq: int = 0
    planned_gb_per_rank: float | None = None


@dataclass(frozen=True)
class HistoryEntry:
    """One revision as ``history`` shows it: planned and logged GB per rank side by side."""

    id: int
    host: str
    setting: str
    proposed_by: str | None
    applied_by: str | None
    proposed_at: datetime
    outcome: str
    planned_gb_per_rank: float | None
    logged_gb_per_rank: float | None
    startup_s: float | None
    device_tokens: int | None
    failure_kind: str | None
    kind: str = "change"  # "restart": the same config started again; "rollback": see returned_to
    returned_to: int | None = None  # a rollback's revision it returned to


@dataclass(frozen=True)
class RollbackTarget:
    """The configuration a rollback returns a host to: the audit's revision ``revision`` (the
    number ``history`` shows), which is the host agent's own revision ``agent_revision``."""

    revision: int
    host: str
    agent_revision: int
    setting: HiCacheSetting
    applied_by: str | None
    applied_at: datetime | None


class Audit(Protocol):
    """Everything the core records and reads back."""

    def record_proposal(
        self,
        host: str,
        proposed_by: str,
        change: PlannedChange,
        at: datetime,
        expires_at: datetime,
        channel: str,
        returns_to: int | None = None,
    ) -> ProposalTerms: ...

    def rollback_target(self, host: str | None, revision: int | None) -> RollbackTarget:
        """Where ``rollback [revision] [host]`` returns: revision ``revision`` of the history
        (of ``host`` when given), or ``host``'s last other config that became ready when None.
        Raises :class:`~bot.errors.NotFound` or :class:`~bot.errors.InputError` saying why not."""
        ...

    def proposal(self, proposal_id: int) -> ProposalTerms: ...

    def claim_apply(self, proposal_id: int, actor: str, at: datetime) -> ProposalTerms: ...

    def settle_refused(self, proposal_id: int) -> None: ...

    def settle_expired(self, proposal_id: int) -> None: ...

    def cancel(self, proposal_id: int, actor: str, at: datetime) -> ProposalTerms: ...

    def record_refusal(self, refusal: Refusal, text: str, at: datetime, channel: str) -> None: ...

    def record_operation(
        self, watch: Watch, operation: AgentOperation, proposal_id: int | None, channel: str
    ) -> None: ...

    def record_events(self, watch: Watch, events: Sequence[AgentEvent]) -> None: ...

    def finish(self, watch: Watch, operation: AgentOperation, view: ProgressView) -> None: ...

    def unfinished(self) -> list[Watch]: ...

    def applied_unstarted(self) -> list[ProposalTerms]: ...

    def known(self, host: str, operation_id: int) -> bool: ...

    def import_operation(
        self, host: str, operation: AgentOperation, events: Sequence[AgentEvent]
    ) -> Watch: ...

    def history(self, host: str | None, limit: int) -> list[HistoryEntry]: ...
