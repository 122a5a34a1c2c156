"""Injected 429 and 500 answers, seen and retried by the real slack_sdk retry handlers."""

from __future__ import annotations

import contextlib
import random

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import (
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator

from bot.errors import InputError
from bot.testing import SlackApiStandIn


def _failed_pattern(slack: SlackApiStandIn, calls: int) -> list[bool]:
    """Which of ``calls`` chat.postMessage calls the stand-in failed, in order."""
    client = WebClient(token=slack.bot_token, base_url=slack.url)
    for i in range(calls):
        # Failures are the point: the pattern is read from the log below.
        with contextlib.suppress(SlackApiError):
            client.chat_postMessage(channel="C1", text=str(i))
    return [c.status != 200 for c in slack.calls("chat.postMessage")]


def test_a_429_carries_retry_after_and_slacks_ratelimited_body(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """Without a retry handler the SDK raises on 429, seeing Retry-After and error ratelimited."""
    ts = client.chat_postMessage(channel="C1", text="a")["ts"]
    slack.faults.fail_next("chat.update", 1, status=429, retry_after=7)
    with pytest.raises(SlackApiError) as caught:
        client.chat_update(channel="C1", ts=ts, text="b")
    assert caught.value.response.status_code == 429
    assert caught.value.response.headers["Retry-After"] == "7"
    assert caught.value.response["error"] == "ratelimited"
    stored = slack.message("C1", ts)
    assert stored is not None
    assert stored.text == "a"


def test_rate_limit_retry_handler_retries_a_429_until_it_lands(
    slack: SlackApiStandIn,
) -> None:
    """RateLimitErrorRetryHandler waits Retry-After and retries; the update lands once."""
    client = WebClient(
        token=slack.bot_token,
        base_url=slack.url,
        retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=1)],
    )
    ts = client.chat_postMessage(channel="C1", text="a")["ts"]
    slack.faults.fail_next("chat.update", 1, status=429, retry_after=1)
    client.chat_update(channel="C1", ts=ts, text="b")
    updates = slack.calls("chat.update")
    assert [c.status for c in updates] == [429, 200]
    assert updates[1].at - updates[0].at >= 1.0
    stored = slack.message("C1", ts)
    assert stored is not None
    assert (stored.text, stored.edits) == ("b", 1)


def test_server_error_retry_handler_retries_a_500(slack: SlackApiStandIn) -> None:
    """ServerErrorRetryHandler retries a 500 and the post lands once."""
    client = WebClient(
        token=slack.bot_token,
        base_url=slack.url,
        # The SDK's default backoff waits 0.5 s then 1 s (plus jitter) between the tries; what
        # is checked here is that the 500s reach it, not how long it waits.
        retry_handlers=[
            ServerErrorRetryHandler(
                max_retry_count=2, interval_calculator=FixedValueRetryIntervalCalculator(0.01)
            )
        ],
    )
    slack.faults.fail_next("chat.postMessage", 2, status=500)
    client.chat_postMessage(channel="C1", text="a")
    assert [c.status for c in slack.calls("chat.postMessage")] == [500, 500, 200]
    assert [m.text for m in slack.history("C1")] == ["a"]


def test_faults_touch_only_the_method_they_name(slack: SlackApiStandIn, client: WebClient) -> None:
    """A fault set for chat.update leaves chat.postMessage answering normally."""
    slack.faults.fail_share("chat.update", 1.0, status=500)
    assert client.chat_postMessage(channel="C1", text="a")["ok"] is True


def test_a_seeded_share_fails_the_same_calls_on_every_run() -> None:
    """The same seed fails the same calls in two runs; another seed fails others."""
    patterns = []
    for seed in (11, 11, 12):
        with SlackApiStandIn() as slack:
            slack.faults.fail_share("chat.postMessage", 1 / 3, status=500, seed=seed)
            patterns.append(_failed_pattern(slack, 30))
    assert patterns[0] == patterns[1]
    assert patterns[0] != patterns[2]
    # A third of 30 calls, give or take what a fair coin does: well away from none or all.
    assert 3 <= sum(patterns[0]) <= 20


def test_mixed_shares_answer_each_call_by_one_seeded_draw(slack: SlackApiStandIn) -> None:
    """With a third 429 and a tenth 500, call i gets 429 when the seed's i-th draw is below
    1/3, 500 when below 1/3 + 1/10, else 200: both kinds occur, as the seed says."""
    slack.faults.fail_shares("chat.postMessage", {429: 1 / 3, 500: 1 / 10}, seed=6)
    _failed_pattern(slack, 40)
    draws = random.Random(6)
    expected = []
    for _ in range(40):
        drawn = draws.random()
        expected.append(429 if drawn < 1 / 3 else 500 if drawn < 1 / 3 + 1 / 10 else 200)
    assert [c.status for c in slack.calls("chat.postMessage")] == expected
    assert {429, 500, 200} <= set(expected)


def test_shares_adding_up_to_more_than_every_call_are_refused(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """Shares over 1 in all are refused and no fault is installed."""
    with pytest.raises(InputError, match="more than every call"):
        slack.faults.fail_shares("chat.postMessage", {429: 0.7, 500: 0.5})
    assert client.chat_postMessage(channel="C1", text="a")["ok"] is True


@pytest.mark.parametrize(("share", "expected"), [(0.0, [False] * 6), (1.0, [True] * 6)])
def test_share_zero_fails_nothing_and_share_one_fails_everything(
    slack: SlackApiStandIn, share: float, expected: list[bool]
) -> None:
    """A share of 0 never fails and a share of 1 always does."""
    slack.faults.fail_share("chat.postMessage", share, status=500)
    assert _failed_pattern(slack, 6) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"share": 1.5}, "between 0 and 1"),
        ({"share": 0.5, "status": 404}, "429, 500 or 503"),
        ({"share": 0.5, "retry_after": -1}, "negative"),
    ],
)
def test_a_bad_fault_rule_is_refused_and_changes_nothing(
    slack: SlackApiStandIn, client: WebClient, kwargs: dict[str, float], message: str
) -> None:
    """An out-of-range share, status or Retry-After is refused and no fault is installed."""
    with pytest.raises(InputError, match=message):
        slack.faults.fail_share("chat.postMessage", **kwargs)  # type: ignore[arg-type]
    assert client.chat_postMessage(channel="C1", text="a")["ok"] is True


def test_a_non_positive_count_is_refused(slack: SlackApiStandIn, client: WebClient) -> None:
    """fail_next with a count below 1 is refused and nothing fails."""
    with pytest.raises(InputError, match="not positive"):
        slack.faults.fail_next("chat.postMessage", 0)
    assert client.chat_postMessage(channel="C1", text="a")["ok"] is True


def test_clear_stops_all_faults(slack: SlackApiStandIn, client: WebClient) -> None:
    """After clear() the stand-in answers every call normally again."""
    slack.faults.fail_share("chat.postMessage", 1.0, status=500)
    slack.faults.fail_next("chat.postMessage", 3)
    slack.faults.clear()
    assert client.chat_postMessage(channel="C1", text="a")["ok"] is True
