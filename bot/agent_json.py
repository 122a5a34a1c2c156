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

Import the values from here. They are written by concept in private modules: the plan
(``bot._agent_plans``), operations with their events, failures and revisions
(``bot._agent_operations``), the status (``bot._agent_status``), each field read by
``bot._agent_fields``.
"""

from __future__ import annotations

from bot._agent_memory import AgentMemoryNotice, MemoryWatchView
from bot._agent_operations import (
    AgentEvent,
    AgentFailure,
    AgentOperation,
    AgentRevision,
    OperationPage,
    StartFigures,
    read_events,
    read_revisions,
)
from bot._agent_plans import AgentPlan, PlannedChange
from bot._agent_status import AgentStatus

__all__ = [
    "AgentEvent",
    "AgentFailure",
    "AgentMemoryNotice",
    "AgentOperation",
    "AgentPlan",
    "AgentRevision",
    "AgentStatus",
    "MemoryWatchView",
    "OperationPage",
    "PlannedChange",
    "StartFigures",
    "read_events",
    "read_revisions",
]
