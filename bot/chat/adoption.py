"""Operations a bot started but never recorded, found again at their agents.

An apply claims its proposal in the store, then asks the agent to start the operation, then
records the operation the agent answered with. A bot that dies between the agent's accepting and
its own write (SIGKILL, OOM, a host reboot), or one whose connection broke after the accept while
the agent then stayed silent longer than the apply waits for it, leaves a proposal applied with
no operation: its message would never be finished, and nothing would watch the restart. The bot
asks each such proposal's agent for the operation it started (:mod:`bot.chat.claims`), records it
as the proposal's and watches it, so its progress edits the proposal's message as if nothing
happened. It does so at start (:func:`adopt_applied`) and on every sweep of a running bot
(:func:`adopt_abandoned`), which takes only the claims the apply that made them has given up on.

An agent that answers and ran no operation for a claim never started it: the proposal is settled
refused, as the apply itself settles it when the agent answers in time, and is not looked for
again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from bot.chat.agent_client import DEFAULT_TIMEOUT_S
from bot.chat.audit import Watch
from bot.chat.change_commands import RECORD_PATIENCE_S, watch_started
from bot.chat.claims import operation_for_claim
from bot.chat.handler_context import Context
from bot.errors import AgentError

__all__ = ["ABANDONED_AFTER", "adopt_abandoned", "adopt_applied"]

log = logging.getLogger(__name__)

#: How long after its claim an apply may still be asking its agent: the submit's timeout, then
#: up to RECORD_PATIENCE_S looking for the operation and as long again recording it, each last
#: call up to its timeout. A claim older than this is no running apply's: a sweep may take it
#: without racing the apply to record (or refuse) the same operation.
ABANDONED_AFTER = timedelta(seconds=2 * RECORD_PATIENCE_S + 4 * DEFAULT_TIMEOUT_S)


def adopt_applied(ctx: Context, claimed_before: datetime | None = None) -> list[Watch]:
    """Record and watch the operation of every proposal applied but never recorded (claimed
    before ``claimed_before``, when given); a proposal whose agent is silent is left for the next
    look, one whose agent ran no operation for it is settled refused."""
    adopted: list[Watch] = []
    for terms in ctx.audit.applied_unstarted():
        if terms.host not in ctx.clients or terms.settled_by is None:
            continue
        if claimed_before is not None and (
            terms.settled_at is None or terms.settled_at >= claimed_before
        ):
            continue  # its apply may still be asking the agent
        host = ctx.settings.host(terms.host)
        try:
            operation = operation_for_claim(ctx.client(host), terms, ctx.audit)
        except AgentError as exc:
            log.warning(
                "proposal #%s's operation not looked for at %s: %s", terms.id, host.name, exc
            )
            continue
        if operation is None:
            log.warning(
                "proposal #%s was applied but %s ran no operation for it: settled refused",
                terms.id,
                host.name,
            )
            ctx.audit.settle_refused(terms.id)
            continue
        log.info(
            "proposal #%s's operation %s found at %s: watched", terms.id, operation.id, host.name
        )
        reply = watch_started(
            ctx, host, operation, terms.proposed_by, terms.settled_by, terms.id, terms.returns_to
        )
        adopted.append(reply.watch)
    return adopted


def adopt_abandoned(ctx: Context) -> list[Watch]:
    """One sweep of a running bot: :func:`adopt_applied` for the claims older than
    :data:`ABANDONED_AFTER`, whose applies have stopped asking their agents."""
    return adopt_applied(ctx, claimed_before=ctx.clock.now() - ABANDONED_AFTER)
