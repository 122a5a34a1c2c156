"""Which of ``[policy] usergroups`` a Slack user is in, read with ``usergroups.users.list``.

Slack sends a user id with every command and click, never the user's groups, so the bot asks
for each configured group's members (scope ``usergroups:read``) and keeps the answer for
``ttl_s`` (default 30 s): a member added to or removed from a group is seen within a minute,
while a burst of clicks costs one call per group. A group whose members cannot be read (an
error, a missing scope, no answer) is never taken as membership: the person is marked as in
an unreadable group (read again on the next request), and policy refuses a guarded action saying so
(:meth:`bot.chat.policy.Policy.may`).

::

    groups = UserGroups(client, frozenset({"S0ONCALL"}))
    actor = groups.actor("U0ANA")      # Actor("U0ANA", groups={"S0ONCALL"}) for a member
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from bot.chat.policy import Actor

__all__ = ["DEFAULT_GROUPS_TTL_S", "UserGroups"]

log = logging.getLogger(__name__)

#: How long a group's members are trusted before they are read again.
DEFAULT_GROUPS_TTL_S = 30.0


@dataclass(frozen=True)
class _Read:
    """One group's members as last read, and when (monotonic)."""

    members: frozenset[str]
    at: float


class UserGroups:
    """Resolves people to the configured groups they are in; thread-safe."""

    def __init__(
        self,
        client: WebClient,
        groups: frozenset[str],
        ttl_s: float = DEFAULT_GROUPS_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._groups = groups
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._reads: dict[str, _Read] = {}

    def actor(self, user: str) -> Actor:
        """``user`` with the configured groups they are in, and those that could not be read."""
        member: set[str] = set()
        unreadable: set[str] = set()
        for group in sorted(self._groups):
            members = self._members(group)
            if members is None:
                unreadable.add(group)
            elif user in members:
                member.add(group)
        return Actor(user, frozenset(member), frozenset(unreadable))

    def _members(self, group: str) -> frozenset[str] | None:
        now = self._monotonic()
        with self._lock:
            known = self._reads.get(group)
        if known is not None and now - known.at < self._ttl_s:
            return known.members
        members = self._read(group)
        if members is not None:  # a failed read is tried again on the next request
            with self._lock:
                self._reads[group] = _Read(members, now)
        return members

    def _read(self, group: str) -> frozenset[str] | None:
        try:
            answer = self._client.usergroups_users_list(usergroup=group)
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else exc
            log.warning("members of user group %s not read: %s", group, error)
            return None
        except SlackClientError as exc:
            log.warning("members of user group %s not read: %s", group, exc)
            return None
        users = answer.get("users")
        if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
            log.warning("members of user group %s not read: the answer holds no user list", group)
            return None
        return frozenset(users)
