"""The agent's error answers as kinds of :class:`bot.errors.AgentError`, each with its body.

The agent answers (``bot.agent.api``'s table)::

    401 unauthorized ............ AgentAuthError
    404 no such operation ....... AgentNotFound        (AgentRejected)
    409 another operation ....... AgentBusy            (AgentRejected; holder, since)
    409 stale fingerprint ....... AgentStale           (AgentRejected)
    422 plan refused ............ AgentPlanRefused     (AgentRejected; the Plan)
    422 invalid body ............ AgentRejected
    503 host could not answer ... AgentUnavailable
    no answer at all ............ AgentUnreachable

``message`` is the agent's ``detail`` as a person can read it; ``body`` the JSON as sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.errors import AgentError, AgentRejected

__all__ = [
    "AgentBusy",
    "AgentNotFound",
    "AgentPlanRefused",
    "AgentStale",
    "AgentUnavailable",
]


class AgentNotFound(AgentRejected):
    """404: the agent has no such operation or revision."""


class AgentBusy(AgentRejected):
    """409: another operation holds the server; ``holder`` started it at ``since``."""

    def __init__(self, message: str, body: Mapping[str, Any], holder: str, since: str) -> None:
        super().__init__(message, status_code=409, body=dict(body))
        self.holder = holder
        self.since = since


class AgentStale(AgentRejected):
    """409: the host's facts changed since the plan's fingerprint was taken."""


class AgentPlanRefused(AgentRejected):
    """422 with a Plan: the planner refused the change (``plan`` is the agent's Plan JSON)."""

    def __init__(self, message: str, body: Mapping[str, Any], plan: Mapping[str, Any]) -> None:
        super().__init__(message, status_code=422, body=dict(body))
        self.plan: Mapping[str, Any] = plan


class AgentUnavailable(AgentError):
    """503: the agent answered but the host, its server control or its state could not."""

    def __init__(self, message: str, body: object | None = None) -> None:
        super().__init__(message)
        self.body = body
