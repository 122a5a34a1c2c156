"""Capacity reports through the real Slack app in HTTP mode (signed commands to the Bolt app on
uvicorn) and, for the report itself, in Socket Mode too (envelopes from the Socket Mode
stand-in); Web API calls to the stand-in, a real agent on the simulator, a real store."""

from __future__ import annotations

import io
import re
from contextlib import AbstractContextManager

import matplotlib.image
import pytest

from bot.reports import CHART_PX, load_report_settings
from bot.store import Store
from bot.testing import SlackApiStandIn, SlackRequestSigner, SocketModeStandIn
from bot.testing._methods import BOT_USER_ID
from tests.chat.conftest import RunningAgent
from tests.slack._harness import (
    BEN,
    CHANNEL,
    EVE,
    SIGNING_SECRET,
    RunningBot,
    http_bot,
    settings_for,
    socket_bot,
    text_of,
    top_level,
    wait_ephemeral,
    wait_until,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # the PNG spec's first eight bytes
# The field notes' host: 159,274 device tokens per rank, whatever the HiCache ratio.
DEVICE_TOKENS = 159_274


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["http", "socket_mode"])
def test_report_posts_the_report_and_uploads_its_chart_in_the_thread(
    mode: str,
    kimi_agent: RunningAgent,
    slack: SlackApiStandIn,
    store: Store,
    request: pytest.FixtureRequest,
) -> None:
    """/kimi report (a signed request, or a Socket Mode envelope) posts one message naming the
    host, its setting and KV figures, and uploads the host's chart in that message's thread:
    PNG bytes that decode at the chart's size, the alt text set, thread_ts the report's ts."""
    reports = load_report_settings({})
    settings = settings_for(kimi_agent.url)
    socket_mode: SocketModeStandIn | None = None
    running: AbstractContextManager[RunningBot]
    if mode == "http":
        running = http_bot(slack, settings, store, reports=reports)
    else:
        socket_mode = request.getfixturevalue("socket_mode")
        assert socket_mode is not None
        running = socket_bot(slack, socket_mode, settings, store, reports=reports)
    with running as bot:
        if socket_mode is None:
            bot.command("report", BEN, SlackRequestSigner(SIGNING_SECRET))
        else:
            sent = socket_mode.push_slash_command("report", user_id=BEN, channel_id=CHANNEL)
            socket_mode.wait_for_ack(sent.envelope_id)
        wait_until(lambda: bool(top_level(slack)), what="the report message")
        (report,) = top_level(slack)
        assert report.text.startswith("Capacity report at ")
        # What the report recommends is proposed by the bot's own user (auth.test).
        assert bot.bot.core.context.reports_proposer == BOT_USER_ID
        # The shared agent may have been resized by an earlier test: any ratio, but one.
        assert re.search(r"kimi-01: ratio \d+ x device pool", report.text), report.text
        assert f"{DEVICE_TOKENS:,}" in text_of(report)
        wait_until(lambda: bool(slack.replies(CHANNEL, report.ts)), what="the chart upload")
        (shared,) = slack.replies(CHANNEL, report.ts)
        (file_id,) = shared.files
    upload = slack.upload(file_id)
    assert upload is not None
    assert upload.completed
    assert upload.thread_ts == report.ts
    assert upload.channel == CHANNEL
    assert upload.alt_text is not None
    assert "kimi-01" in upload.alt_text
    assert upload.data is not None
    assert upload.data.startswith(PNG_SIGNATURE)
    pixels = matplotlib.image.imread(io.BytesIO(upload.data), format="png")
    assert (pixels.shape[1], pixels.shape[0]) == CHART_PX


@pytest.mark.slow
def test_a_schedule_by_a_non_applier_is_refused_to_them_alone(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """/kimi report every 6h from someone outside [policy] appliers is refused ephemerally and
    schedules nothing; the same command from an applier is scheduled and said in the channel."""
    signer = SlackRequestSigner(SIGNING_SECRET)
    reports = load_report_settings({})
    with http_bot(slack, settings_for(kimi_agent.url), store, reports=reports) as bot:
        refused = wait_ephemeral(slack, bot.command("report every 6h", EVE, signer))
        assert refused.startswith("refused: ")
        assert EVE in refused
        assert store.schedules() == []
        assert top_level(slack) == []
        bot.command("report every 6h", BEN, signer)
        wait_until(lambda: bool(top_level(slack)), what="the schedule's confirmation")
    (said,) = top_level(slack)
    assert said.text.startswith("Capacity reports every 6h (UTC)")
    (schedule,) = store.schedules()
    assert (schedule.created_by, schedule.cadence) == (BEN, f"every {6 * 3600}s")  # stored in s
