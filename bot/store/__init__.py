"""The store: configuration history and audit, operations, capacity samples, report schedules,
fleet rollouts.

SQLAlchemy 2 models, Alembic migrations (``migrations/``), and a :class:`Store` whose methods take
and return frozen dataclasses (no ORM object leaves this package). SQLite by default (WAL,
foreign keys on, busy timeout), PostgreSQL or any SQLAlchemy URL for teams::

    upgrade_to_head("sqlite:///kimi-ops.db")
    store = Store("sqlite:///kimi-ops.db")
    proposal = store.record_proposal("kimi-01", settings, plan, proposed_by="U1", ...)

What a host agent reports goes in through :mod:`bot.store.from_agent`, the one mapping between
the agent's answers and these records.
"""

from __future__ import annotations

from bot.agent_json import AgentRevision, read_revisions
from bot.store.config import DEFAULT_URL, StoreSettings, resolve_url
from bot.store.from_agent import (
    record_agent_events,
    record_agent_operation,
    record_agent_plan,
    record_agent_proposal,
    revision_of_agent,
)
from bot.store.migrate import (
    current_revision,
    downgrade,
    ensure_at_head,
    head_revision,
    upgrade,
    upgrade_to_head,
)
from bot.store.records import (
    FINAL_OUTCOMES,
    CapacitySample,
    FleetProposalRecord,
    FleetReplicaProposal,
    OperationRecord,
    PlanSummary,
    ProposalRecord,
    RefusalRecord,
    ReportSchedule,
    RevisionKind,
    RevisionOutcome,
    RevisionRecord,
    RolloutRecord,
    RolloutReplicaRecord,
    SchedulerLease,
    StoredEvent,
)
from bot.store.store import Store

__all__ = [
    "DEFAULT_URL",
    "FINAL_OUTCOMES",
    "AgentRevision",
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
    "Store",
    "StoreSettings",
    "StoredEvent",
    "current_revision",
    "downgrade",
    "ensure_at_head",
    "head_revision",
    "read_revisions",
    "record_agent_events",
    "record_agent_operation",
    "record_agent_plan",
    "record_agent_proposal",
    "resolve_url",
    "revision_of_agent",
    "upgrade",
    "upgrade_to_head",
]
