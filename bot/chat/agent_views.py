"""What the bot reads from an agent's answers: the values of :mod:`bot.agent_json`, the one
reader the store's mapping uses too, under the names the bot core imports."""

from __future__ import annotations

from bot.agent_json import (
    AgentEvent,
    AgentFailure,
    AgentOperation,
    AgentPlan,
    AgentStatus,
    OperationPage,
    PlannedChange,
)

__all__ = [
    "AgentEvent",
    "AgentFailure",
    "AgentOperation",
    "AgentPlan",
    "AgentStatus",
    "OperationPage",
    "PlannedChange",
]
