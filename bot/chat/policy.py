"""Who may do what, and whether a proposal can still be applied. Pure: time is passed in.

The rules (DESIGN.md, Safety rules)::

    status, resize (a proposal), history, hosts, report now ... anyone
    apply, restart, rollback, report schedules ................ [policy] appliers, or members
                                                                  of [policy] usergroups
    cancel a proposal ......................................... its proposer, or an applier
    apply a proposal: not a refused plan (over budget), still open (not applied or cancelled),
      not expired (proposal_ttl_minutes), not void (no other operation started on the host
      since it was made), and with require_second_person, not by its proposer.

Each check answers ``None`` (allowed) or a :class:`Refusal`, a typed value the core records and
the front ends word (:func:`bot.chat.wording.refusal_text`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from bot.chat.config import PolicySettings

__all__ = [
    "Action",
    "Actor",
    "Policy",
    "ProposalState",
    "ProposalTerms",
    "Refusal",
    "RefusalKind",
]


class Action(StrEnum):
    """What a person asks to do that policy decides on."""

    APPLY = "apply"
    RESTART = "restart"
    ROLLBACK = "rollback"
    SCHEDULE = "schedule"
    CANCEL = "cancel"


#: The actions only appliers may take.
_GUARDED = frozenset({Action.APPLY, Action.RESTART, Action.ROLLBACK, Action.SCHEDULE})


class RefusalKind(StrEnum):
    """Why a request was refused; each is answered and recorded."""

    UNAUTHORIZED = "unauthorized"  # not an applier nor in an allowed group
    SECOND_PERSON = "second_person"  # require_second_person and the applier proposed it
    EXPIRED = "expired"  # older than proposal_ttl_minutes
    STALE = "stale"  # another operation started on the host since it was proposed
    LOCKED = "locked"  # already applied or cancelled (or another operation holds the server)
    OVER_BUDGET = "over_budget"  # the plan was refused: there is nothing to apply


class ProposalState(StrEnum):
    OPEN = "open"
    APPLIED = "applied"
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # timed out or void, and recorded so


@dataclass(frozen=True)
class Actor:
    """A person as the front end knows them: their id, the groups they are in, and the groups
    whose members the front end could not read (membership unknown: never granted)."""

    id: str
    groups: frozenset[str] = frozenset()
    unreadable_groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ProposalTerms:
    """What policy needs to know of a proposal."""

    id: int
    host: str
    proposed_by: str
    created_at: datetime
    fits: bool
    reason: str = ""  # the planner's sentence (for a refused plan)
    state: ProposalState = ProposalState.OPEN
    settled_by: str | None = None  # who applied or cancelled it
    settled_at: datetime | None = None
    ratio: float | None = None  # what it asks for, sent again at apply time
    size_gb: int | None = None
    fingerprint: str = ""  # of the facts it was planned on
    # A rollback proposal: the audit's revision it returns to, and that host agent's own id of it.
    returns_to: int | None = None
    agent_revision: int | None = None


@dataclass(frozen=True)
class Refusal:
    """A refused request: ``kind`` says why; the other fields are what the answer shows."""

    kind: RefusalKind
    action: Action
    actor: str
    host: str | None = None
    proposal_id: int | None = None
    detail: str = ""  # the planner's sentence, the rule that applied, or the unreadable groups
    by: str | None = None  # who holds, applied or cancelled it
    at: datetime | None = None  # when it expired, was settled, or the other operation started


class Policy:
    """The rules of ``[policy]``, checked against a time the caller passes in."""

    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings

    @property
    def ttl(self) -> timedelta:
        return timedelta(minutes=self.settings.proposal_ttl_minutes)

    def expires_at(self, created_at: datetime) -> datetime:
        return created_at + self.ttl

    def is_applier(self, actor: Actor) -> bool:
        return actor.id in self.settings.appliers or bool(actor.groups & self.settings.usergroups)

    def may(self, actor: Actor, action: Action, host: str | None = None) -> Refusal | None:
        """Whether ``actor`` may take ``action`` at all (apply, restart, rollback, schedule); a
        refusal names the configured groups that could not be read, if any."""
        if action in _GUARDED and not self.is_applier(actor):
            return Refusal(
                RefusalKind.UNAUTHORIZED, action, actor.id, host=host, detail=self._unread(actor)
            )
        return None

    def _unread(self, actor: Actor) -> str:
        unread = sorted(actor.unreadable_groups & self.settings.usergroups)
        if not unread:
            return ""
        return f"the members of user group {', '.join(unread)} could not be read; try again"

    def check_cancel(self, actor: Actor, proposal: ProposalTerms) -> Refusal | None:
        """Its proposer or an applier may withdraw an open proposal."""
        if actor.id != proposal.proposed_by and not self.is_applier(actor):
            detail = self._unread(actor)
            return self._refuse(RefusalKind.UNAUTHORIZED, Action.CANCEL, actor, proposal, detail)
        return self._settled(Action.CANCEL, actor, proposal)

    def check_apply(
        self,
        actor: Actor,
        proposal: ProposalTerms,
        now: datetime,
        last_operation_at: datetime | None,
    ) -> Refusal | None:
        """Whether ``actor`` may apply ``proposal`` at ``now``; ``last_operation_at`` is when the
        newest operation on the proposal's host started (None: none known)."""
        refusal = self.may(actor, Action.APPLY, proposal.host)
        if refusal is not None:
            return self._refuse(
                RefusalKind.UNAUTHORIZED, Action.APPLY, actor, proposal, detail=refusal.detail
            )
        settled = self._settled(Action.APPLY, actor, proposal)
        if settled is not None:
            return settled
        if not proposal.fits:
            return self._refuse(
                RefusalKind.OVER_BUDGET, Action.APPLY, actor, proposal, detail=proposal.reason
            )
        if self.settings.require_second_person and actor.id == proposal.proposed_by:
            return self._refuse(RefusalKind.SECOND_PERSON, Action.APPLY, actor, proposal)
        expires = self.expires_at(proposal.created_at)
        if now >= expires:
            return self._refuse(RefusalKind.EXPIRED, Action.APPLY, actor, proposal, at=expires)
        if last_operation_at is not None and last_operation_at > proposal.created_at:
            return self._refuse(
                RefusalKind.STALE, Action.APPLY, actor, proposal, at=last_operation_at
            )
        return None

    def _settled(self, action: Action, actor: Actor, proposal: ProposalTerms) -> Refusal | None:
        if proposal.state is ProposalState.OPEN:
            return None
        if proposal.state is ProposalState.EXPIRED:
            expired = self.expires_at(proposal.created_at)
            return self._refuse(RefusalKind.EXPIRED, action, actor, proposal, at=expired)
        return self._refuse(
            RefusalKind.LOCKED,
            action,
            actor,
            proposal,
            detail=proposal.state.value,
            by=proposal.settled_by,
            at=proposal.settled_at,
        )

    @staticmethod
    def _refuse(
        kind: RefusalKind,
        action: Action,
        actor: Actor,
        proposal: ProposalTerms,
        detail: str = "",
        by: str | None = None,
        at: datetime | None = None,
    ) -> Refusal:
        return Refusal(
            kind=kind,
            action=action,
            actor=actor.id,
            host=proposal.host,
            proposal_id=proposal.id,
            detail=detail,
            by=by,
            at=at,
        )
