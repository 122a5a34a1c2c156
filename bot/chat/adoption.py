"""Operations a bot started but never recorded, found again at their agents after a restart.

An apply claims its proposal in the store, then asks the agent to start the operation, then
records the operation the agent answered with. A bot that dies between the agent's accepting and
its own write (SIGKILL, OOM, a host reboot) leaves a proposal applied with no operation: its
message would never be finished, and nothing would watch the restart. On start the bot asks each
such proposal's agent for the operation it started (:mod:`bot.chat.claims`), records it as the
proposal's and watches it, so its progress edits the proposal's message as if nothing happened.
"""

from __future__ import annotations

import logging

from bot.chat.audit import Watch
from bot.chat.change_commands import watch_started
from bot.chat.claims import operation_for_claim
from bot.chat.handler_context import Context
from bot.errors import AgentError

__all__ = ["adopt_applied"]

log = logging.getLogger(__name__)


def adopt_applied(ctx: Context) -> list[Watch]:
    """Record and watch the operation of every proposal applied but never recorded; a proposal
    whose agent is silent, or has no such operation, is left as it is."""
    adopted: list[Watch] = []
    for terms in ctx.audit.applied_unstarted():
        if terms.host not in ctx.clients or terms.settled_by is None:
            continue
        host = ctx.settings.host(terms.host)
        try:
            operation = operation_for_claim(ctx.client(host), terms, ctx.audit)
        except AgentError as exc:
            log.warning("proposal #%s's operation not looked for at %s: %s", terms.id, host, exc)
            continue
        if operation is None:
            log.warning("proposal #%s was applied but %s ran no operation for it", terms.id, host)
            continue
        reply = watch_started(ctx, host, operation, terms.proposed_by, terms.settled_by, terms.id)
        adopted.append(reply.watch)
    return adopted
