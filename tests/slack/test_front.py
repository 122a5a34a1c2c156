"""The Slack front end over the Web API stand-in and a real store, without an agent: proposals
posted and closed when their time is up, a post the channel refuses told to the sender."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from slack_sdk import WebClient

from bot.agent_json import AgentOperation
from bot.chat.audit import Watch
from bot.chat.policy import Actor
from bot.chat.replies import OperationReply, ProposalReply
from bot.chat.store_audit import StoreAudit
from bot.slack import Origin, SlackFrontEnd
from bot.slack._book import MessageBook
from bot.slack.expiry import ProposalSweep
from bot.store import RevisionOutcome, Store, record_agent_operation, record_agent_proposal
from bot.testing import SlackApiStandIn
from tests.reports._fixtures import SetClock
from tests.slack._samples import PLAN, T0, proposal_reply

CHANNEL = "C0OPS"


def _front(slack: SlackApiStandIn, store: Store) -> SlackFrontEnd:
    client = WebClient(token=slack.bot_token, base_url=slack.url)
    return SlackFrontEnd(client, MessageBook(store), sleep=lambda _: None)


def _proposed(store: Store, front: SlackFrontEnd, slack: SlackApiStandIn) -> ProposalReply:
    """A fitting proposal recorded in the store and posted through the front end."""
    record = record_agent_proposal(
        store,
        "kimi-01",
        {"plan": PLAN, "fingerprint": "f0"},
        proposed_by="U0BEN",
        channel=CHANNEL,
        expires_at=T0 + timedelta(minutes=15),
        at=T0,
    )
    reply = replace(proposal_reply(), id=record.id)
    front.answer(Origin(CHANNEL, "U0BEN", slack.new_response_url()))(Actor("U0BEN"), reply)
    return reply


def _has_buttons(slack: SlackApiStandIn, ts: str) -> bool:
    message = slack.message(CHANNEL, ts)
    assert message is not None
    return any(block["type"] == "actions" for block in message.blocks)


def test_a_proposal_is_posted_recorded_and_closed_once_its_time_is_up(
    slack: SlackApiStandIn, store: Store
) -> None:
    """The proposal's ts is kept in the store; before expiry a sweep changes nothing, after it
    the buttons give way to a line saying it expired and the store records it expired, once."""
    front = _front(slack, store)
    reply = _proposed(store, front, slack)
    ts = store.proposal(reply.id).message_ts
    assert ts is not None
    assert _has_buttons(slack, ts)
    clock = SetClock(T0 + timedelta(minutes=14))
    audit = StoreAudit(store, lambda host: {"revisions": []})
    sweep = ProposalSweep(audit, MessageBook(store), front, clock)
    assert sweep.run() == 0
    assert _has_buttons(slack, ts)
    assert store.history("kimi-01", 1)[0].outcome is RevisionOutcome.PROPOSED
    clock.current = T0 + timedelta(minutes=15)
    assert sweep.run() == 1
    assert not _has_buttons(slack, ts)
    message = slack.message(CHANNEL, ts)
    assert message is not None
    assert f"Proposal #{reply.id} expired at 10:15 UTC" in message.text
    assert store.history("kimi-01", 1)[0].outcome is RevisionOutcome.EXPIRED
    edits = message.edits
    clock.current = T0 + timedelta(hours=1)
    assert sweep.run() == 0  # closed once
    assert (slack.message(CHANNEL, ts) or message).edits == edits


def test_a_proposal_whose_message_cannot_be_edited_stays_open_for_the_next_sweep(
    slack: SlackApiStandIn, store: Store
) -> None:
    """A chat.update answered 500 leaves the proposal open in the store; the next sweep closes
    it and records it expired."""
    front = _front(slack, store)
    reply = _proposed(store, front, slack)
    clock = SetClock(T0 + timedelta(minutes=20))
    sweep = ProposalSweep(
        StoreAudit(store, lambda host: {"revisions": []}), MessageBook(store), front, clock
    )
    slack.faults.fail_next("chat.update", 1, status=500)
    assert sweep.run() == 0
    assert store.history("kimi-01", 1)[0].outcome is RevisionOutcome.PROPOSED
    assert sweep.run() == 1
    assert store.history("kimi-01", 1)[0].outcome is RevisionOutcome.EXPIRED
    closed = slack.message(CHANNEL, _ts(store, reply))
    assert closed is not None
    assert f"Proposal #{reply.id} expired" in closed.text


def _ts(store: Store, reply: ProposalReply) -> str:
    ts = store.proposal(reply.id).message_ts
    assert ts is not None
    return ts


def test_an_operation_on_the_host_voids_the_other_open_proposals(
    slack: SlackApiStandIn, store: Store
) -> None:
    """A restart started on kimi-01 replaces the buttons of its open proposal with 'is void'."""
    front = _front(slack, store)
    reply = _proposed(store, front, slack)
    ts = store.proposal(reply.id).message_ts
    assert ts is not None
    body = {
        "id": 3, "kind": "restart", "state": "running", "actor": "U0ANA",
        "created_at": (T0 + timedelta(minutes=2)).isoformat(),
    }  # fmt: skip
    record_agent_operation(store, "kimi-01", {"operation": body, "events": []}, {"revisions": []})
    started = OperationReply(
        Watch("kimi-01", 3, "Restart kimi-01", None, "U0ANA"), AgentOperation.from_json(body)
    )
    front.answer(Origin(CHANNEL, "U0ANA"))(Actor("U0ANA"), started)
    message = slack.message(CHANNEL, ts)
    assert message is not None
    assert not _has_buttons(slack, ts)
    assert "is void: another operation started on kimi-01 at 10:02 UTC" in message.text
