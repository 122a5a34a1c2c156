"""``storage attach|detach|clear`` and ``hicache write-policy|prefetch-policy``: changes SGLang's
HiCache runtime API makes with no restart (docs/sglang.md, Live changes).

Each is started at once, as ``restart`` is, by an applier only: the agent decides live or
restart on fresh facts and runs it as an operation of kind ``live`` (no restart) or
``reconfigure`` (the flags written, then a restart), recorded and watched like any other; a
change it refuses is answered with its reason.
"""

from __future__ import annotations

from typing import Any

from bot.chat.change_commands import watch_started
from bot.chat.grammar import LiveHiCache
from bot.chat.handler_context import Context
from bot.chat.policy import Action, Actor
from bot.chat.replies import ProblemReply, Reply
from bot.chat.shared_replies import refused
from bot.errors import AgentError

__all__ = ["live_change"]


def change_body(command: LiveHiCache) -> dict[str, Any]:
    """The agent's ``change`` body for ``command``."""
    body: dict[str, Any] = {"kind": command.kind}
    for key in ("backend", "extra_config", "policy"):
        value = getattr(command, key)
        if value is not None:
            body[key] = value
    return body


def live_change(ctx: Context, actor: Actor, command: LiveHiCache) -> Reply:
    host = ctx.settings.host(command.host)
    refusal = ctx.policy.may(actor, Action.APPLY, host.name)
    if refusal is not None:
        return refused(ctx, refusal)
    try:
        operation = ctx.client(host).submit_live(change_body(command), actor.id)
    except AgentError as exc:  # refused (the agent's reason), busy, or no answer
        return ProblemReply(str(exc), host.name)
    return watch_started(ctx, host, operation, None, actor.id, None)
