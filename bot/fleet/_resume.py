"""The operation a rollout asked a replica's agent for, found at the agent when the bot that
asked stopped before saving the agent's answer (the replica's line says ``resizing`` with no
operation): the newest operation of the rollout's kind by its actor since the rollout started
(less :data:`CLOCK_SKEW`, as the agent's clock is another host's)."""

from __future__ import annotations

from datetime import datetime, timedelta

from bot.fleet.plan import ReplicaAgent
from bot.vocab import OperationKind

__all__ = ["CLOCK_SKEW", "RECENT_OPERATIONS", "started_operation"]

#: How far behind the bot's clock an agent's may be when a replica's operation is looked for.
CLOCK_SKEW = timedelta(minutes=5)
#: How many of an agent's newest operations are searched for a replica's.
RECENT_OPERATIONS = 20


def started_operation(
    agent: ReplicaAgent, kind: OperationKind, actor: str, since: datetime | None
) -> int | None:
    """The id of the operation the rollout started at ``agent``, or None when it started none;
    raises :class:`~bot.errors.AgentError` when the agent does not answer."""
    after = None if since is None else since - CLOCK_SKEW
    found = [
        op.id
        for op in agent.operations(RECENT_OPERATIONS)
        if op.kind is kind and op.actor == actor and (after is None or op.created_at >= after)
    ]
    return max(found, default=None)
