"""The operation an applied proposal started, found at its agent when the bot never read the
agent's answer (the bot died, or the connection broke after the request was sent).

The match: among the agent's newest operations, the first not yet recorded that is a resize by
the proposal's applier, of the proposal's setting (a rollback to the proposal's agent revision,
for a rollback proposal), created after the claim (less :data:`CLOCK_SKEW`, as the agent's clock
is another host's).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from bot.agent_json import AgentOperation
from bot.chat.agent_client import AgentClient
from bot.chat.audit import Audit
from bot.chat.policy import ProposalTerms
from bot.vocab import OperationKind

__all__ = ["CLOCK_SKEW", "RECENT_OPERATIONS", "operation_for_claim"]

#: How far behind the bot's clock the agent's may be when its operation is matched to a claim.
CLOCK_SKEW = timedelta(minutes=5)
#: How many of an agent's newest operations are searched for a claimed proposal's.
RECENT_OPERATIONS = 20


def operation_for_claim(
    client: AgentClient, terms: ProposalTerms, audit: Audit
) -> AgentOperation | None:
    """The operation the applied proposal ``terms`` started at ``client``'s agent, or None;
    raises :class:`~bot.errors.AgentError` when the agent does not answer."""
    assert terms.settled_at is not None  # an applied proposal's claim time
    since = terms.settled_at - CLOCK_SKEW
    for operation in sorted(client.operations(RECENT_OPERATIONS), key=lambda op: op.id):
        kind = OperationKind.RESIZE if terms.returns_to is None else OperationKind.ROLLBACK
        if (
            operation.kind is kind
            and operation.actor == terms.settled_by
            and operation.created_at >= since
            and _asks_for(operation, terms)
            and not audit.known(terms.host, operation.id)
        ):
            return operation
    return None


def _asks_for(operation: AgentOperation, terms: ProposalTerms) -> bool:
    """Whether the operation's request is the proposal's setting, sent as an apply sends it:
    the size when the proposal has one, else the ratio."""
    request = operation.raw.get("request")
    if not isinstance(request, Mapping):
        return False
    if terms.returns_to is not None:
        return request.get("revision") == terms.agent_revision
    if terms.size_gb is not None:
        return _number(request.get("size_gb")) == float(terms.size_gb)
    return terms.ratio is not None and _number(request.get("ratio")) == float(terms.ratio)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
