"""Operations through the Slack app in HTTP mode: who may apply, one operation per proposal,
expiry, a failing start rolled back, rate limits on chat.update, and a bot restarted
mid-operation finishing the same message. A real agent on the simulator, a real store."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest

from bot.store import RevisionOutcome, Store
from bot.testing import SlackApiStandIn, SlackRequestSigner, StoredMessage
from tests.chat._core_fixtures import ShiftedClock
from tests.chat.conftest import SMALL, RunningAgent, SimHost, agent_on_sim
from tests.slack._harness import (
    ANA,
    APPLY,
    BEN,
    CHANNEL,
    EVE,
    SIGNING_SECRET,
    RunningBot,
    http_bot,
    posted_proposal_id,
    proposal_message,
    settings_for,
    text_of,
    top_level,
    wait_ephemeral,
    wait_until,
)

SIGNER = SlackRequestSigner(SIGNING_SECRET)


def _operations(agent: RunningAgent) -> int:
    with agent.http() as http:
        return len(http.get("/v1/operations", params={"limit": 500}).json()["operations"])


def _propose(
    bot: RunningBot, slack: SlackApiStandIn, text: str = "resize ratio 4"
) -> StoredMessage:
    before = len(top_level(slack))
    bot.command(text, BEN, SIGNER)
    return proposal_message(slack, posted_proposal_id(slack, before))


def _id(message: StoredMessage) -> int:
    return int(message.text.split("#", 1)[1].split(" ", 1)[0])


def _ended(
    slack: SlackApiStandIn, ts: str, word: str = "READY", timeout: float = 90
) -> StoredMessage:
    wait_until(
        lambda: word in text_of(slack.message(CHANNEL, ts) or {}),
        timeout=timeout,
        what=f"the operation's message to say {word}",
    )
    message = slack.message(CHANNEL, ts)
    assert message is not None
    return message


def _buttons(message: StoredMessage) -> int:
    return [block["type"] for block in message.blocks].count("actions")


@pytest.mark.slow
def test_an_unauthorized_click_is_refused_and_a_double_click_starts_one_operation(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """eve's Apply gets an ephemeral refusal, recorded, and the buttons stay; ana's two clicks
    at once start one operation, the second told it was already applied."""
    with http_bot(slack, settings_for(kimi_agent.url), store) as bot:
        posted = _propose(bot, slack)
        pid = _id(posted)
        before = _operations(kimi_agent)
        denied = bot.click(APPLY, pid, EVE, SIGNER)
        assert "may not apply proposals" in wait_ephemeral(slack, denied)
        assert [r.user_id for r in store.refusals()] == [EVE]
        assert _buttons(slack.message(CHANNEL, posted.ts) or posted) == 1
        assert _operations(kimi_agent) == before
        urls: list[str] = []
        clicks = [
            threading.Thread(target=lambda: urls.append(bot.click(APPLY, pid, ANA, SIGNER)))
            for _ in range(2)
        ]
        for click in clicks:
            click.start()
        for click in clicks:
            click.join()
        wait_until(lambda: any(slack.response_posts(url) for url in urls), what="a refusal")
        refused = [post.body["text"] for url in urls for post in slack.response_posts(url)]
        assert len(refused) == 1
        assert f"proposal #{pid} was already applied by {ANA}" in refused[0]
        _ended(slack, posted.ts)
        assert _operations(kimi_agent) == before + 1
    assert sorted(r.user_id for r in store.refusals()) == [ANA, EVE]


@pytest.mark.slow
def test_an_expired_proposal_is_refused_and_its_buttons_replaced(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """Applied 16 minutes after it was made (the TTL is 15), a proposal is refused to the
    clicker, its message loses its buttons for a line saying it expired, and nothing starts."""
    clock = ShiftedClock()
    with http_bot(slack, settings_for(kimi_agent.url), store, clock=clock) as bot:
        posted = _propose(bot, slack)
        before = _operations(kimi_agent)
        clock.shift = timedelta(minutes=16)
        url = bot.click(APPLY, _id(posted), ANA, SIGNER)
        assert "expired at" in wait_ephemeral(slack, url)
        wait_until(lambda: _buttons(slack.message(CHANNEL, posted.ts) or posted) == 0)
        closed = slack.message(CHANNEL, posted.ts)
        assert closed is not None
        assert f"Proposal #{_id(posted)} expired at" in closed.text
    assert _operations(kimi_agent) == before
    assert store.history("kimi-01", 1)[0].outcome is RevisionOutcome.EXPIRED


@pytest.mark.slow
def test_an_unclicked_proposal_is_closed_and_recorded_expired_by_the_sweep(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """With nobody clicking and no report scheduler running, once the clock is 16 minutes on
    (the TTL is 15) the bot's sweep replaces the buttons with the expired line and records the
    proposal expired; nothing starts and nobody is sent anything."""
    clock = ShiftedClock()
    with http_bot(slack, settings_for(kimi_agent.url), store, clock=clock, sweep_s=0.1) as bot:
        assert bot.bot.scheduler is None
        posted = _propose(bot, slack)
        before = _operations(kimi_agent)
        assert _buttons(slack.message(CHANNEL, posted.ts) or posted) == 1
        clock.shift = timedelta(minutes=16)
        wait_until(
            lambda: _buttons(slack.message(CHANNEL, posted.ts) or posted) == 0,
            what="the sweep to close the proposal",
        )
        wait_until(
            lambda: store.history("kimi-01", 1)[0].outcome is RevisionOutcome.EXPIRED,
            what="the proposal recorded expired",
        )
        closed = slack.message(CHANNEL, posted.ts)
        assert closed is not None
        assert f"Proposal #{_id(posted)} expired at" in closed.text
    assert _operations(kimi_agent) == before
    assert slack.calls("chat.postEphemeral") == []
    assert store.refusals() == []


@pytest.mark.slow
def test_a_third_of_chat_updates_rate_limited_loses_nothing(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """With a third of chat.update calls answered 429 (Retry-After 1), the message still ends
    with the ready figures and the thread notice is posted."""
    slack.faults.fail_share("chat.update", 1 / 3, status=429, retry_after=1, seed=7)
    with http_bot(slack, settings_for(kimi_agent.url), store) as bot:
        posted = _propose(bot, slack)
        bot.click(APPLY, _id(posted), ANA, SIGNER)
        final = _ended(slack, posted.ts, timeout=120)
        wait_until(lambda: bool(slack.replies(CHANNEL, posted.ts)), what="the notice")
    updates = slack.calls("chat.update")
    assert any(call.status == 429 for call in updates)
    assert updates[-1].status == 200
    assert "637,097" in text_of(final)
    assert "is ready" in slack.replies(CHANNEL, posted.ts)[0].text


@pytest.mark.slow
def test_a_bot_restarted_mid_operation_finishes_the_same_message(
    kimi_agent: RunningAgent, slack: SlackApiStandIn, store: Store
) -> None:
    """The bot stops right after Apply; a new bot on the same store resumes the watch and
    edits the same message (same channel and ts) to ready, posting no new one."""
    with http_bot(slack, settings_for(kimi_agent.url), store) as bot:
        posted = _propose(bot, slack)
        bot.click(APPLY, _id(posted), ANA, SIGNER)
        wait_until(lambda: store.unfinished_operations() != [], what="the operation recorded")
        wait_until(lambda: (slack.message(CHANNEL, posted.ts) or posted).edits > 0)
    (record,) = store.unfinished_operations()
    assert (record.channel, record.message_ts) == (CHANNEL, posted.ts)
    messages = len(top_level(slack))
    with http_bot(slack, settings_for(kimi_agent.url), store):
        final = _ended(slack, posted.ts)
        wait_until(lambda: bool(slack.replies(CHANNEL, posted.ts)), what="the notice")
    assert len(top_level(slack)) == messages
    assert "637,097" in text_of(final)
    notice = slack.replies(CHANNEL, posted.ts)[-1].text
    assert f"<@{BEN}>" in notice
    assert f"<@{ANA}>" in notice
    assert store.operation(record.id).finished_at is not None


@pytest.mark.slow
def test_a_failing_start_ends_with_its_cause_and_the_rollback(
    tmp_path: Path, slack: SlackApiStandIn, store: Store
) -> None:
    """On the 2-GPU host with no headroom, size 24 passes the planner but SGLang refuses its
    host pool: the message ends rolled back with the cause, and the thread has SGLang's
    decisive line and the rollback, each mentioning both people."""
    host = SimHost(
        profile=SMALL,
        version="0.5.23",
        headroom_gb=0,
        hicache=("--enable-hierarchical-cache", "--hicache-size", "8"),
        host_name="small-01",
    )
    with (
        agent_on_sim(tmp_path / "small", host) as agent,
        http_bot(slack, settings_for(agent.url, host="small-01"), store) as bot,
    ):
        posted = _propose(bot, slack, "resize size 24")
        bot.click(APPLY, _id(posted), ANA, SIGNER)
        final = _ended(slack, posted.ts, "ROLLED BACK", timeout=120)
        wait_until(lambda: len(slack.replies(CHANNEL, posted.ts)) >= 2, what="two notices")
    assert "host_memory" in text_of(final)
    rolling, rolled = slack.replies(CHANNEL, posted.ts)[:2]
    assert "rolling back" in rolling.text
    assert "Not enough host memory available" in text_of(rolling)
    assert "was rolled back" in rolled.text
    for notice in (rolling, rolled):
        assert f"<@{BEN}>" in notice.text
        assert f"<@{ANA}>" in notice.text
