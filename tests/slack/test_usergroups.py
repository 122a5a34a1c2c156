"""Members of [policy] usergroups read from the Web API stand-in: a member is in the group, a
change is seen once the cached answer is older than the TTL, and a failed read is never taken
as membership."""

from __future__ import annotations

from slack_sdk import WebClient

from bot.chat.config import PolicySettings
from bot.chat.policy import Action, Actor, Policy, RefusalKind
from bot.chat.wording import refusal_text
from bot.slack.usergroups import UserGroups
from bot.testing import SlackApiStandIn

ONCALL = "S0ONCALL"
ANA, EVE = "U0ANA", "U0EVE"


class _Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _groups(slack: SlackApiStandIn, ticks: _Ticks, ttl_s: float = 30.0) -> UserGroups:
    # No retry handlers: a 500 reaches the resolver at once.
    client = WebClient(token=slack.bot_token, base_url=slack.url, timeout=10)
    return UserGroups(client, frozenset({ONCALL}), ttl_s=ttl_s, monotonic=ticks)


def test_a_member_is_in_the_group_and_a_non_member_is_not(slack: SlackApiStandIn) -> None:
    """ana, listed by usergroups.users.list, gets the group; eve gets none; both readable."""
    slack.set_usergroup(ONCALL, (ANA, "U0BEN"))
    groups = _groups(slack, _Ticks())
    assert groups.actor(ANA) == Actor(ANA, frozenset({ONCALL}))
    assert groups.actor(EVE) == Actor(EVE)
    (call,) = slack.calls("usergroups.users.list")  # the second person came from the cache
    assert call.body["usergroup"] == ONCALL


def test_a_group_change_is_seen_once_the_ttl_has_passed(slack: SlackApiStandIn) -> None:
    """Within the TTL the cached members hold; one tick past it, eve added to the group is in."""
    slack.set_usergroup(ONCALL, (ANA,))
    ticks = _Ticks()
    groups = _groups(slack, ticks, ttl_s=30.0)
    assert groups.actor(EVE).groups == frozenset()
    slack.set_usergroup(ONCALL, (ANA, EVE))
    ticks.now += 29.9
    assert groups.actor(EVE).groups == frozenset()
    ticks.now += 0.2
    assert groups.actor(EVE).groups == frozenset({ONCALL})
    assert len(slack.calls("usergroups.users.list")) == 2


def test_a_failed_read_grants_nothing_and_is_tried_again(slack: SlackApiStandIn) -> None:
    """A 500 and an unknown group both leave the person outside the group, marked unreadable;
    the next request reads again and finds the member."""
    slack.set_usergroup(ONCALL, (ANA,))
    slack.faults.fail_next("usergroups.users.list", 1, status=500)
    groups = _groups(slack, _Ticks())
    assert groups.actor(ANA) == Actor(ANA, unreadable_groups=frozenset({ONCALL}))
    assert groups.actor(ANA) == Actor(ANA, frozenset({ONCALL}))
    unknown = UserGroups(
        WebClient(token=slack.bot_token, base_url=slack.url), frozenset({"S0GONE"})
    )
    assert unknown.actor(ANA) == Actor(ANA, unreadable_groups=frozenset({"S0GONE"}))


def test_policy_refuses_an_unreadable_group_saying_so() -> None:
    """A person whose group could not be read is refused a guarded action, and the refusal
    names the group that could not be read; a readable non-member's refusal does not."""
    policy = Policy(PolicySettings(usergroups=frozenset({ONCALL})))
    unread = policy.may(Actor(EVE, unreadable_groups=frozenset({ONCALL})), Action.APPLY)
    assert unread is not None
    assert unread.kind is RefusalKind.UNAUTHORIZED
    assert f"user group {ONCALL} could not be read" in refusal_text(unread)
    plain = policy.may(Actor(EVE), Action.APPLY)
    assert plain is not None
    assert "could not be read" not in refusal_text(plain)
    assert policy.may(Actor(ANA, frozenset({ONCALL})), Action.APPLY) is None
