"""The Web API stand-in answers the real slack_sdk WebClient as Slack does."""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.testing import SlackApiStandIn

# Slack's message timestamps: Unix seconds, a dot, six digits.
TS = re.compile(r"^\d{10}\.\d{6}$")


def _ts_value(ts: str) -> tuple[int, int]:
    seconds, micros = ts.split(".")
    return int(seconds), int(micros)


def test_post_message_returns_a_slack_shaped_ts_and_keeps_the_text(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """chat.postMessage answers ok with a ts of Slack's shape and the stand-in keeps the text."""
    answer = client.chat_postMessage(channel="C1", text="resize planned")
    assert answer["ok"] is True
    assert answer["channel"] == "C1"
    assert TS.match(answer["ts"])
    stored = slack.message("C1", answer["ts"])
    assert stored is not None
    assert stored.text == "resize planned"


def test_timestamps_increase_within_a_channel_and_repeat_across_channels(
    client: WebClient,
) -> None:
    """Each channel gets increasing, distinct ts values, counted separately per channel."""
    first = [client.chat_postMessage(channel="C1", text=str(i))["ts"] for i in range(5)]
    other = client.chat_postMessage(channel="C2", text="x")["ts"]
    assert len(set(first)) == 5
    assert [_ts_value(t) for t in first] == sorted(_ts_value(t) for t in first)
    assert other == first[0]


def test_update_replaces_text_and_blocks_of_the_named_message(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """chat.update changes the stored text and blocks of the message with that ts only."""
    keep = client.chat_postMessage(channel="C1", text="other")["ts"]
    ts = client.chat_postMessage(channel="C1", text="starting")["ts"]
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*ready*"}}]
    answer = client.chat_update(channel="C1", ts=ts, text="ready", blocks=blocks)
    assert answer["ts"] == ts
    stored = slack.message("C1", ts)
    assert stored is not None
    assert (stored.text, list(stored.blocks), stored.edits) == ("ready", blocks, 1)
    kept = slack.message("C1", keep)
    assert kept is not None
    assert (kept.text, kept.edits) == ("other", 0)


def test_update_of_an_unknown_ts_is_message_not_found_and_changes_nothing(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """chat.update naming a ts never posted fails with message_not_found; history is unchanged."""
    ts = client.chat_postMessage(channel="C1", text="starting")["ts"]
    with pytest.raises(SlackApiError) as caught:
        client.chat_update(channel="C1", ts="1767000000.999900", text="ready")
    assert caught.value.response["error"] == "message_not_found"
    with pytest.raises(SlackApiError):
        client.chat_update(channel="C2", ts=ts, text="ready")
    assert [(m.ts, m.text) for m in slack.history("C1")] == [(ts, "starting")]
    assert slack.history("C2") == []


def test_thread_replies_are_listed_under_their_parent(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """A chat.postMessage with thread_ts is a reply listed under that parent, oldest first."""
    parent = client.chat_postMessage(channel="C1", text="parent")["ts"]
    client.chat_postMessage(channel="C1", text="log 1", thread_ts=parent)
    client.chat_postMessage(channel="C1", text="log 2", thread_ts=parent)
    client.chat_postMessage(channel="C1", text="unrelated")
    assert [m.text for m in slack.replies("C1", parent)] == ["log 1", "log 2"]


def test_a_reply_to_a_missing_parent_is_refused(slack: SlackApiStandIn, client: WebClient) -> None:
    """A reply naming a thread_ts that does not exist fails with thread_not_found."""
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel="C1", text="log", thread_ts="1767000000.000500")
    assert caught.value.response["error"] == "thread_not_found"
    assert slack.history("C1") == []


def test_post_without_text_or_blocks_is_no_text(slack: SlackApiStandIn, client: WebClient) -> None:
    """chat.postMessage with neither text nor blocks fails with no_text and stores nothing."""
    # The SDK warns first, as it should for a message without fallback text.
    with pytest.raises(SlackApiError) as caught, pytest.warns(UserWarning, match="`text`"):
        client.chat_postMessage(channel="C1")
    assert caught.value.response["error"] == "no_text"
    assert slack.history("C1") == []


def test_ephemeral_message_is_answered_but_not_kept_in_the_channel(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """chat.postEphemeral answers a message_ts and leaves the channel's history empty."""
    answer = client.chat_postEphemeral(channel="C1", user="U1", text="only you")
    assert TS.match(answer["message_ts"])
    assert slack.history("C1") == []
    (call,) = slack.calls("chat.postEphemeral")
    assert (call.body["user"], call.body["text"]) == ("U1", "only you")


def test_calls_record_token_json_and_form_bodies(slack: SlackApiStandIn, client: WebClient) -> None:
    """Each call is recorded with its bearer token and body, JSON or form alike."""
    client.auth_test()
    client.chat_postMessage(channel="C1", text="hi", blocks=[{"type": "divider"}])
    auth, post = slack.calls()
    assert (auth.method, auth.token, auth.status) == ("auth.test", slack.bot_token, 200)
    assert auth.headers["content-type"].startswith("application/x-www-form-urlencoded")
    assert post.method == "chat.postMessage"
    assert post.headers["content-type"].startswith("application/json")
    assert post.body == {"channel": "C1", "text": "hi", "blocks": [{"type": "divider"}]}
    assert json.loads(post.raw_body) == post.body


def test_auth_test_names_the_bot(client: WebClient) -> None:
    """auth.test answers ok with a user id and team id, as Bolt reads them."""
    answer = client.auth_test()
    assert answer["ok"] is True
    assert answer["user_id"].startswith("U")
    assert answer["team_id"].startswith("T")


@pytest.mark.parametrize(
    ("token", "error"),
    [
        (None, "not_authed"),
        ("xoxb-someone-else", "invalid_auth"),
        ("xapp-kimi-ops-test", "not_allowed_token_type"),
    ],
)
def test_bad_tokens_get_slacks_errors_and_change_nothing(
    slack: SlackApiStandIn, token: str | None, error: str
) -> None:
    """A missing, unknown or wrong-kind token gets Slack's error and posts nothing."""
    client = WebClient(token=token, base_url=slack.url)
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel="C1", text="hi")
    assert caught.value.response["error"] == error
    assert slack.history("C1") == []


def test_unknown_method_is_unknown_method(slack: SlackApiStandIn, client: WebClient) -> None:
    """A method the stand-in does not serve answers Slack's unknown_method."""
    with pytest.raises(SlackApiError) as caught:
        client.api_call("chat.scheduleMessage", json={"channel": "C1", "text": "later"})
    assert caught.value.response["error"] == "unknown_method"
    assert slack.calls("chat.scheduleMessage")[0].status == 200


@pytest.mark.parametrize(
    ("content_type", "body", "error"),
    [
        ("application/json", b"{not json", "invalid_json"),
        ("application/json", b"[1, 2]", "invalid_json"),
        ("text/xml", b"<channel>C1</channel>", "invalid_post_type"),
        ("application/x-www-form-urlencoded", b"\xff\xfe", "invalid_form_data"),
    ],
)
def test_unreadable_bodies_get_slacks_errors_and_change_nothing(
    slack: SlackApiStandIn, content_type: str, body: bytes, error: str
) -> None:
    """A body that is not JSON or a form is answered with Slack's error and posts nothing."""
    response = httpx.post(
        slack.url + "chat.postMessage",
        content=body,
        headers={"Content-Type": content_type, "Authorization": f"Bearer {slack.bot_token}"},
    )
    assert response.status_code == 200
    assert response.json() == {"ok": False, "error": error}
    assert slack.history("C1") == []


def test_wait_for_returns_once_the_predicate_holds(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """wait_for blocks until a call from another thread satisfies the predicate."""
    poster = threading.Timer(0.2, lambda: client.chat_postMessage(channel="C1", text="late"))
    poster.start()
    calls = slack.wait_for(lambda cs: any(c.method == "chat.postMessage" for c in cs), timeout=5)
    poster.join()
    assert [c.method for c in calls] == ["chat.postMessage"]


def test_wait_for_times_out_naming_the_calls_seen(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """wait_for raises TimeoutError listing the calls it saw when the predicate never holds."""
    client.auth_test()
    with pytest.raises(TimeoutError, match=r"auth\.test"):
        slack.wait_for(lambda cs: len(cs) > 1, timeout=0.2)


def test_connections_open_without_socket_mode_is_refused(slack: SlackApiStandIn) -> None:
    """apps.connections.open fails when no Socket Mode stand-in is attached."""
    client = WebClient(token=slack.app_token, base_url=slack.url)
    with pytest.raises(SlackApiError) as caught:
        client.apps_connections_open(app_token=slack.app_token)
    assert caught.value.response["ok"] is False


def test_concurrent_posts_each_get_their_own_ts(slack: SlackApiStandIn) -> None:
    """Posts from 20 threads at once are all recorded and all get distinct timestamps."""

    def post(i: int) -> str:
        client = WebClient(token=slack.bot_token, base_url=slack.url)
        return str(client.chat_postMessage(channel="C1", text=str(i))["ts"])

    with ThreadPoolExecutor(max_workers=20) as pool:
        stamps = list(pool.map(post, range(40)))
    assert len(set(stamps)) == 40
    assert len(slack.calls("chat.postMessage")) == 40
    assert sorted(m.text for m in slack.history("C1")) == sorted(str(i) for i in range(40))


def test_usergroups_users_list_answers_the_members_the_test_set(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """usergroups.users.list answers a set group's members, recording the call, and refuses an
    unknown group with no_such_subteam and a missing one with invalid_arguments."""
    slack.set_usergroup("S0ONCALL", ("U0ANA", "U0BEN"))
    assert client.usergroups_users_list(usergroup="S0ONCALL")["users"] == ["U0ANA", "U0BEN"]
    (call,) = slack.calls("usergroups.users.list")
    assert call.body["usergroup"] == "S0ONCALL"
    with pytest.raises(SlackApiError) as unknown:
        client.usergroups_users_list(usergroup="S0NOBODY")
    assert unknown.value.response["error"] == "no_such_subteam"
    with pytest.raises(SlackApiError) as missing:
        client.api_call("usergroups.users.list", params={})
    assert missing.value.response["error"] == "invalid_arguments"
    slack.set_usergroup("S0ONCALL", ("U0EVE",))
    assert client.usergroups_users_list(usergroup="S0ONCALL")["users"] == ["U0EVE"]
