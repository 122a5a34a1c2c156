"""Operations a bot started but never recorded, found again at their agents after a restart.

An apply claims its proposal in the store, then asks the agent to start the operation, then
records the operation the agent answered with. A bot that dies between the agent's accepting and
its own write (SIGKILL, OOM, a host reboot) leaves a proposal applied with no operation: its
message would never be finished, and nothing would watch the restart. On start the bot asks each
such proposal's agent for the operation it started: the newest operations, the first not yet
recorded that is a resize by the proposal's applier, of the proposal's setting, created after the
claim (less :data:`CLOCK_SKEW`, as the agent's clock is another host's). It is recorded as the
proposal's and watched, so its progress edits the proposal's message as if nothing happened.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta

from bot.chat.agent_client import AgentClient
from bot.chat.agent_views import AgentOperation
from bot.chat.audit import Audit, Watch
from bot.chat.handlers import Context, watch_started
from bot.chat.policy import ProposalTerms
from bot.errors import AgentError
from bot.vocab import OperationKind

__all__ = ["CLOCK_SKEW", "RECENT_OPERATIONS", "adopt_applied"]

log = logging.getLogger(__name__)

#: How far behind the bot's clock the agent's may be when its operation is matched to a claim.
CLOCK_SKEW = timedelta(minutes=5)
#: How many of an agent's newest operations are searched for a claimed proposal's.
RECENT_OPERATIONS = 20


def adopt_applied(ctx: Context) -> list[Watch]:
    """Record and watch the operation of every proposal applied but never recorded; a proposal
    whose agent is silent, or has no such operation, is left as it is."""
    adopted: list[Watch] = []
    for terms in ctx.audit.applied_unstarted():
        if terms.host not in ctx.clients or terms.settled_by is None:
            continue
        host = ctx.settings.host(terms.host)
        try:
            operation = _started_for(ctx.client(host), terms, ctx.audit)
        except AgentError as exc:
            log.warning("proposal #%s's operation not looked for at %s: %s", terms.id, host, exc)
            continue
        if operation is None:
            log.warning("proposal #%s was applied but %s ran no operation for it", terms.id, host)
            continue
        reply = watch_started(ctx, host, operation, terms.proposed_by, terms.settled_by, terms.id)
        adopted.append(reply.watch)
    return adopted


def _started_for(client: AgentClient, terms: ProposalTerms, audit: Audit) -> AgentOperation | None:
    assert terms.settled_at is not None  # an applied proposal's claim time
    since = terms.settled_at - CLOCK_SKEW
    for operation in sorted(client.operations(RECENT_OPERATIONS), key=lambda op: op.id):
        if (
            operation.kind is OperationKind.RESIZE
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
    if terms.size_gb is not None:
        return _number(request.get("size_gb")) == float(terms.size_gb)
    return terms.ratio is not None and _number(request.get("ratio")) == float(terms.ratio)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
