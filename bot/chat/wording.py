"""The core's sentences, the same for every front end: refusals and the notices of an operation.

Front ends lay these out (Block Kit, terminal lines) but do not re-word them, so Slack, the
terminal and the demo tell a person the same thing.
"""

from __future__ import annotations

from datetime import datetime

from bot.chat.policy import Action, Refusal, RefusalKind

__all__ = ["hhmm", "refusal_text"]

_VERB = {
    Action.APPLY: "apply proposals",
    Action.RESTART: "restart servers",
    Action.ROLLBACK: "roll servers back",
    Action.SCHEDULE: "schedule reports",
    Action.CANCEL: "cancel this proposal",
}


def hhmm(at: datetime | None) -> str:
    """A time as people read it in a channel: ``09:14 UTC``."""
    return "an unknown time" if at is None else f"{at:%H:%M} UTC"


def refusal_text(refusal: Refusal) -> str:
    """One sentence: what was refused, why, and what to do instead."""
    pid = f"proposal #{refusal.proposal_id}"
    kind = refusal.kind
    if kind is RefusalKind.UNAUTHORIZED:
        who = (
            "only its proposer or an applier may"
            if refusal.action is Action.CANCEL
            else "only the people in [policy] appliers (or its usergroups) may"
        )
        return f"{refusal.actor} may not {_VERB[refusal.action]}: {who}"
    if kind is RefusalKind.SECOND_PERSON:
        return f"{pid} was proposed by {refusal.actor}; the policy asks a second person to apply it"
    if kind is RefusalKind.EXPIRED:
        return f"{pid} expired at {hhmm(refusal.at)}; ask for the resize again"
    if kind is RefusalKind.STALE:
        return (
            f"{pid} is void: another operation started on {refusal.host} at {hhmm(refusal.at)}, "
            "after it was proposed; ask for the resize again"
        )
    if kind is RefusalKind.LOCKED:
        if refusal.proposal_id is None:
            return (
                f"{refusal.host} is busy: an operation by {refusal.by} has held it since "
                f"{hhmm(refusal.at)}"
            )
        by = f" by {refusal.by}" if refusal.by else ""
        return f"{pid} was already {refusal.detail}{by} at {hhmm(refusal.at)}"
    return f"{pid} cannot be applied: the plan was refused. {refusal.detail}".rstrip()
