"""Which agent operation a resumed rollout follows for a replica whose id was never saved: the
newest of the rollout's kind by its actor since it started (less five minutes of clock skew)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.agent_json import AgentOperation
from bot.fleet._resume import started_operation
from bot.vocab import OperationKind, OperationState

STARTED = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)


def _op(op_id: int, kind: OperationKind, actor: str, minutes: float) -> AgentOperation:
    return AgentOperation(
        id=op_id, kind=kind, state=OperationState.RUNNING, actor=actor,
        created_at=STARTED + timedelta(minutes=minutes), finished_at=None, plan=None,
        revision=None, rollback_of=None, outcome=None, failure=None, raw={},
    )  # fmt: skip


class Agent:
    """An agent's operation list, newest first as the agent answers it (only what the lookup
    reads; the real agent's answer is in test_resume.py)."""

    def __init__(self, *operations: AgentOperation) -> None:
        self._operations = operations

    def operations(self, limit: int = 20) -> tuple[AgentOperation, ...]:
        return self._operations[:limit]


def test_the_newest_operation_of_the_rollout_s_kind_by_its_actor_is_followed() -> None:
    """Another actor's, another kind's and one from before the rollout (beyond the skew) are
    passed over; of two that match, the newer is the rollout's."""
    ops = (
        _op(9, OperationKind.RESIZE, "U0EVE", 3),  # another actor
        _op(8, OperationKind.RESTART, "U0ANA", 2),  # another kind
        _op(7, OperationKind.RESIZE, "U0ANA", 1),  # the rollout's retry
        _op(6, OperationKind.RESIZE, "U0ANA", -4),  # its first try, within the skew
        _op(5, OperationKind.RESIZE, "U0ANA", -6),  # an earlier rollout's
    )
    assert started_operation(Agent(*ops), OperationKind.RESIZE, "U0ANA", STARTED) == 7
    assert started_operation(Agent(*ops[3:]), OperationKind.RESIZE, "U0ANA", STARTED) == 6


def test_no_operation_of_the_rollout_means_none_was_started() -> None:
    """An agent whose operations are all older or someone else's started nothing for it."""
    agent = Agent(
        _op(5, OperationKind.RESIZE, "U0ANA", -6), _op(4, OperationKind.RESIZE, "U0EVE", 1)
    )
    assert started_operation(agent, OperationKind.RESIZE, "U0ANA", STARTED) is None
