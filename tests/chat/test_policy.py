"""Policy on a fake clock: who may act, expiry, void proposals, the second person."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.chat.config import PolicySettings
from bot.chat.policy import (
    Action,
    Actor,
    Policy,
    ProposalState,
    ProposalTerms,
    Refusal,
    RefusalKind,
)
from bot.chat.wording import refusal_text

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ANA = Actor("ana")
BEN = Actor("ben")
EVE = Actor("eve")
SRE = Actor("sam", groups=frozenset({"S-oncall"}))


class FakeClock:
    """Wall time that moves only when the test says so."""

    def __init__(self, start: datetime) -> None:
        self.at = start

    def now(self) -> datetime:
        return self.at

    def advance(self, **delta: float) -> None:
        self.at += timedelta(**delta)


def _policy(**overrides: object) -> Policy:
    base: dict[str, object] = {
        "appliers": frozenset({"ana", "ben"}),
        "usergroups": frozenset({"S-oncall"}),
        "require_second_person": False,
        "proposal_ttl_minutes": 15,
    }
    base.update(overrides)
    return Policy(PolicySettings(**base))  # type: ignore[arg-type]


def _proposal(**overrides: object) -> ProposalTerms:
    base: dict[str, object] = {
        "id": 12,
        "host": "kimi-01",
        "proposed_by": "ben",
        "created_at": T0,
        "fits": True,
    }
    base.update(overrides)
    return ProposalTerms(**base)  # type: ignore[arg-type]


def _kind(refusal: Refusal | None) -> RefusalKind | None:
    return None if refusal is None else refusal.kind


@pytest.mark.parametrize("action", [Action.APPLY, Action.RESTART, Action.ROLLBACK, Action.SCHEDULE])
def test_only_appliers_and_group_members_may_change_a_server(action: Action) -> None:
    """A listed applier and a member of an allowed group may; anyone else is unauthorized."""
    policy = _policy()
    assert policy.may(ANA, action) is None
    assert policy.may(SRE, action) is None
    refusal = policy.may(EVE, action, host="kimi-01")
    assert _kind(refusal) is RefusalKind.UNAUTHORIZED
    assert refusal is not None
    assert refusal.actor == "eve"


def test_nobody_may_change_a_server_when_no_one_is_listed() -> None:
    """Empty appliers and usergroups leave every guarded action refused."""
    policy = _policy(appliers=frozenset(), usergroups=frozenset())
    assert _kind(policy.may(ANA, Action.APPLY)) is RefusalKind.UNAUTHORIZED


def test_a_proposal_is_applicable_until_its_ttl_passes() -> None:
    """At 14:59 after the proposal it applies; at 15:00 it has expired, and says when."""
    clock = FakeClock(T0)
    policy = _policy()
    clock.advance(minutes=14, seconds=59)
    assert policy.check_apply(ANA, _proposal(), clock.now(), None) is None
    clock.advance(seconds=1)
    refusal = policy.check_apply(ANA, _proposal(), clock.now(), None)
    assert _kind(refusal) is RefusalKind.EXPIRED
    assert refusal is not None
    assert refusal.at == T0 + timedelta(minutes=15)
    assert "expired at 09:15 UTC" in refusal_text(refusal)


def test_the_ttl_follows_the_setting() -> None:
    """With proposal_ttl_minutes = 1, a proposal is expired after one minute."""
    clock = FakeClock(T0)
    clock.advance(minutes=1)
    policy = _policy(proposal_ttl_minutes=1)
    assert _kind(policy.check_apply(ANA, _proposal(), clock.now(), None)) is RefusalKind.EXPIRED


def test_a_proposal_is_void_once_another_operation_started_on_the_host() -> None:
    """An operation started after the proposal voids it; one started before does not."""
    policy = _policy()
    now = T0 + timedelta(minutes=5)
    before = T0 - timedelta(minutes=30)
    after = T0 + timedelta(minutes=2)
    assert policy.check_apply(ANA, _proposal(), now, before) is None
    refusal = policy.check_apply(ANA, _proposal(), now, after)
    assert _kind(refusal) is RefusalKind.STALE
    assert refusal is not None
    assert "another operation started on kimi-01 at 09:02 UTC" in refusal_text(refusal)


def test_the_second_person_rule() -> None:
    """With require_second_person the proposer may not apply; another applier may; without the
    rule the proposer may."""
    strict = _policy(require_second_person=True)
    now = T0 + timedelta(minutes=1)
    assert _kind(strict.check_apply(BEN, _proposal(), now, None)) is RefusalKind.SECOND_PERSON
    assert strict.check_apply(ANA, _proposal(), now, None) is None
    assert _policy().check_apply(BEN, _proposal(), now, None) is None


def test_a_refused_plan_cannot_be_applied_and_says_why() -> None:
    """A proposal whose plan was refused is answered with the planner's sentence."""
    proposal = _proposal(fits=False, reason="size 300 GB/rank needs 2400.0 GB; refused")
    refusal = _policy().check_apply(ANA, proposal, T0, None)
    assert _kind(refusal) is RefusalKind.OVER_BUDGET
    assert refusal is not None
    assert "needs 2400.0 GB" in refusal_text(refusal)


def test_an_applied_proposal_says_who_applied_it() -> None:
    """A second apply of an applied proposal is locked, naming who applied it and when."""
    applied = _proposal(
        state=ProposalState.APPLIED, settled_by="ana", settled_at=T0 + timedelta(minutes=3)
    )
    refusal = _policy().check_apply(BEN, applied, T0 + timedelta(minutes=4), None)
    assert _kind(refusal) is RefusalKind.LOCKED
    assert refusal is not None
    assert refusal_text(refusal) == "proposal #12 was already applied by ana at 09:03 UTC"


def test_an_unauthorized_apply_is_refused_before_anything_else() -> None:
    """Someone who may not apply is told so even for an expired proposal."""
    late = T0 + timedelta(hours=2)
    assert _kind(_policy().check_apply(EVE, _proposal(), late, None)) is RefusalKind.UNAUTHORIZED


def test_cancel_is_for_the_proposer_or_an_applier() -> None:
    """The proposer (even if not an applier) and an applier may cancel; a third person may not;
    a cancelled proposal cannot be cancelled again."""
    policy = _policy()
    mine = _proposal(proposed_by="eve")
    assert policy.check_cancel(EVE, mine) is None
    assert policy.check_cancel(ANA, mine) is None
    assert _kind(policy.check_cancel(Actor("zed"), mine)) is RefusalKind.UNAUTHORIZED
    cancelled = _proposal(state=ProposalState.CANCELLED, settled_by="ana", settled_at=T0)
    assert _kind(policy.check_cancel(ANA, cancelled)) is RefusalKind.LOCKED


def test_a_proposal_recorded_expired_stays_expired() -> None:
    """Once recorded expired, a proposal is refused as expired at its expiry time, even if the
    clock reads earlier."""
    expired = _proposal(state=ProposalState.EXPIRED)
    refusal = _policy().check_apply(ANA, expired, T0 + timedelta(minutes=1), None)
    assert _kind(refusal) is RefusalKind.EXPIRED
    assert refusal is not None
    assert refusal.at == T0 + timedelta(minutes=15)
