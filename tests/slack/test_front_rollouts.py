"""A fleet rollout in Slack, through the Slack Web API stand-in and a real store: one message,
posted once and edited in place with a line per replica, and a thread reply on each end."""

from __future__ import annotations

from dataclasses import replace

from slack_sdk import WebClient

from bot.fleet import ReplicaView, RolloutView, view_of
from bot.slack import SlackFrontEnd
from bot.slack._book import MessageBook
from bot.store import Store
from bot.testing import SlackApiStandIn
from bot.vocab import (
    OperationKind,
    ReplicaPhase,
    RolloutState,
)

CHANNEL = "C0OPS"
HOSTS = ("kimi-01", "kimi-02")


def test_a_rollout_is_one_message_edited_in_place_with_thread_replies(
    slack: SlackApiStandIn, store: Store
) -> None:
    """The first view posts the message and keeps its place in the store; later views edit it;
    each replica's end is a reply in its thread naming the host and its phase."""
    front = SlackFrontEnd(
        WebClient(token=slack.bot_token, base_url=slack.url), MessageBook(store), sleep=lambda _: 0
    )
    lines = tuple(ReplicaView(h, f"http://{h}:30000") for h in HOSTS)
    record = store.record_rollout(
        "prod", OperationKind.RESTART, "restart", lines, proposed_by="U0ANA",
        state=RolloutState.RUNNING, channel=CHANNEL,
    )  # fmt: skip
    view: RolloutView = view_of(record)
    front.rollout(view)
    ts = store.rollout(record.id).message_ts
    assert ts is not None
    view = view.with_replica("kimi-01", phase=ReplicaPhase.DONE, seconds=12.5)
    front.rollout(view)
    front.replica_ended(view, "kimi-01")
    view = replace(view.with_replica("kimi-02", phase=ReplicaPhase.DONE), state=RolloutState.DONE)
    front.rollout(view)
    front.replica_ended(view, "kimi-02")

    assert len(slack.calls("chat.postMessage")) == 3  # the message, then one reply per end
    assert len(slack.calls("chat.update")) == 2
    shown = slack.message(CHANNEL, ts)
    assert shown is not None
    assert shown.text == f"Rollout #{record.id} of fleet prod: restart, done"
    body = shown.blocks[1]["text"]["text"]
    assert body.splitlines() == [
        ":white_check_mark: *kimi-01*  done  (out of the router 12.5 s)",
        ":white_check_mark: *kimi-02*  done",
    ]
    replies = [m.text for m in slack.replies(CHANNEL, ts)]
    assert replies == [
        f"kimi-01 done (rollout #{record.id} of fleet prod)",
        f"kimi-02 done (rollout #{record.id} of fleet prod)",
    ]
