"""The Slack front end's capacity reports over the Web API stand-in and a real store, without an
agent: a scheduled report posted with its chart in the thread and its recommendation as a
proposal, a host without a chart, and a failed report said in the channel."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from slack_sdk import WebClient

from bot.chat.replies import ProblemReply, ReportReply
from bot.slack import SlackFrontEnd
from bot.slack._book import MessageBook
from bot.store import Store, record_agent_proposal
from bot.testing import SlackApiStandIn
from tests.slack._samples import PLAN, T0, memory_notice_reply, report_reply

CHANNEL = "C0OPS"


def _front(slack: SlackApiStandIn, store: Store) -> SlackFrontEnd:
    client = WebClient(token=slack.bot_token, base_url=slack.url)
    return SlackFrontEnd(client, MessageBook(store), sleep=lambda _: None)


def _with_recorded_proposal(store: Store) -> ReportReply:
    """The sample report, its recommendation recorded in the store as a proposal."""
    record = record_agent_proposal(
        store,
        "kimi-01",
        {"plan": PLAN, "fingerprint": "f0"},
        proposed_by="kimi-ops-reports",
        channel=CHANNEL,
        expires_at=T0 + timedelta(minutes=15),
        at=T0,
    )
    sample = report_reply(scheduled=True)
    busy = sample.hosts[0]
    assert busy.proposal is not None
    busy = replace(busy, proposal=replace(busy.proposal, id=record.id))
    return replace(sample, hosts=(busy, *sample.hosts[1:]))


def test_a_scheduled_report_posts_its_chart_in_the_thread_and_its_proposal_after_it(
    slack: SlackApiStandIn, store: Store
) -> None:
    """post() puts the report in the channel, uploads the chart in its thread with its bytes,
    file name and alt text, then posts the recommendation with Apply/Cancel, its ts stored."""
    reply = _with_recorded_proposal(store)
    _front(slack, store).post(CHANNEL, reply)
    report, proposal = [m for m in slack.history(CHANNEL) if m.thread_ts is None]
    assert report.text.startswith("Capacity report at 10:00 UTC (schedule #2)")
    chart, recommended = reply.hosts[0].chart, reply.hosts[0].proposal
    assert chart is not None
    assert recommended is not None
    (shared,) = slack.replies(CHANNEL, report.ts)
    (file_id,) = shared.files
    upload = slack.upload(file_id)
    assert upload is not None
    assert (upload.data, upload.filename, upload.alt_text) == (chart.png, chart.filename, chart.alt)
    assert upload.thread_ts == report.ts
    assert proposal.text.startswith(f"Proposal #{recommended.id} for kimi-01")
    assert any(block["type"] == "actions" for block in proposal.blocks)
    assert store.proposal(recommended.id).message_ts == proposal.ts


def test_a_report_without_charts_uploads_nothing(slack: SlackApiStandIn, store: Store) -> None:
    """A report whose hosts have no chart (an unreachable host) is one message, no upload call."""
    silent = report_reply().hosts[1]
    _front(slack, store).post(CHANNEL, ReportReply((silent,)))
    (report,) = slack.history(CHANNEL)
    assert "kimi-02: agent unreachable" in report.text
    assert slack.calls("files.getUploadURLExternal") == []


def test_a_failed_scheduled_report_is_said_in_the_channel(
    slack: SlackApiStandIn, store: Store
) -> None:
    """A ProblemReply posted by the scheduler is a visible error message in the channel."""
    _front(slack, store).post(CHANNEL, ProblemReply("the agent on kimi-01 did not answer"))
    (said,) = slack.history(CHANNEL)
    assert said.text == "error: the agent on kimi-01 did not answer"


def test_the_report_is_in_the_channel_before_any_chart_is_drawn(
    slack: SlackApiStandIn, store: Store
) -> None:
    """Each chart is drawn only after the report message was posted, so a report over many hosts
    reaches the channel without waiting for every host's chart (seconds each)."""
    posted_when_drawn: list[int] = []

    def draw() -> bytes:
        posted_when_drawn.append(len(slack.calls("chat.postMessage")))
        return b"drawn png"

    sample = report_reply()
    busy = sample.hosts[0]
    assert busy.chart is not None
    charted = replace(busy, chart=replace(busy.chart, draw=draw), proposal=None)
    _front(slack, store).post(CHANNEL, replace(sample, hosts=(charted, *sample.hosts[1:])))
    assert posted_when_drawn == [1]  # drawn once, with the report already posted
    (report,) = [m for m in slack.history(CHANNEL) if m.thread_ts is None]
    (shared,) = slack.replies(CHANNEL, report.ts)
    upload = slack.upload(shared.files[0])
    assert upload is not None
    assert upload.data == b"drawn png"


def test_a_memory_notice_is_posted_visibly_in_the_channel(
    slack: SlackApiStandIn, store: Store
) -> None:
    """A MemoryNoticeReply from the sampling turn is one visible message in the channel, with
    the host, the operation and the figures."""
    _front(slack, store).post(CHANNEL, memory_notice_reply())
    (said,) = slack.history(CHANNEL)
    assert said.text.startswith("kimi-01: memory notice at 10:31 UTC: after ready: the server's")
    assert "(last operation #12)" in str(said.blocks)
    assert "headroom 3.0 GB (cgroup), floor 10.7 GB, cgroup limit 14.0 GB" in str(said.blocks)
