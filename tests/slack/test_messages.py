"""Every Slack message kind against its golden Block Kit JSON, and Slack's limits on all of them."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.chat.audit import RollbackTarget, Watch
from bot.chat.progress import Cause, ProgressView
from bot.chat.replies import ReportReply, ReportScheduledReply, ReportSchedulesReply
from bot.hicache import HiCacheSetting
from bot.slack import messages, report_messages
from bot.slack._blocks import SlackMessage
from bot.vocab import FailureKind, OperationState
from tests.slack._samples import (
    SAMPLES,
    as_json,
    daily_in_paris,
    golden_path,
    history_entries,
    proposal_reply,
    render,
    report_reply,
)

# Slack's documented limits (docs/slack.md): 50 blocks, 3,000 characters a section's text,
# 2,000 a field; a message's text fails with msg_too_long at about 4,000.
BLOCKS, SECTION, FIELD, TEXT = 50, 3000, 2000, 4000


def _all_messages(made: SlackMessage | list[SlackMessage]) -> list[dict[str, Any]]:
    found = as_json(made)
    return found if isinstance(found, list) else [found]


def _check_limits(message: dict[str, Any]) -> None:
    assert message["text"].strip(), "every message needs fallback text"
    assert len(message["text"]) < TEXT
    assert 0 < len(message["blocks"]) <= BLOCKS
    for block in message["blocks"]:
        if "text" in block:
            assert len(block["text"]["text"]) <= SECTION
        for field in block.get("fields", []):
            assert len(field["text"]) <= FIELD
        for element in block.get("elements", []):
            if element.get("type") == "mrkdwn":
                assert len(element["text"]) <= SECTION


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_message_matches_its_golden_json(kind: str) -> None:
    """The message is exactly the checked-in JSON (a wording change shows as a diff there;
    ``python -m tests.slack._samples`` rewrites the files)."""
    path = golden_path(kind)
    assert path.is_file(), f"no golden file {path.name}: run python -m tests.slack._samples"
    assert render(kind) == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_message_stays_within_slacks_limits(kind: str) -> None:
    """Fallback text present, at most 50 blocks, sections and fields under their limits."""
    for message in _all_messages(SAMPLES[kind]()):
        _check_limits(message)


def test_a_proposal_that_fits_has_two_buttons_and_a_refused_one_none() -> None:
    """Apply and Cancel carry the proposal id; a refused proposal says why and has no buttons."""
    fits = SAMPLES["proposal_fits"]()
    refused = SAMPLES["proposal_refused"]()
    assert isinstance(fits, SlackMessage)
    assert isinstance(refused, SlackMessage)
    (buttons,) = [b for b in fits.blocks if b["type"] == "actions"]
    assert [(e["action_id"], e["value"]) for e in buttons["elements"]] == [
        ("kimi_apply", "12"),
        ("kimi_cancel", "12"),
    ]
    assert not [b for b in refused.blocks if b["type"] == "actions"]
    assert "try size 68 or less" in json.dumps(refused.blocks)


def test_history_of_fifty_is_three_pages_of_twenty_rows_at_most() -> None:
    """history 50 paginates: every revision appears once, no page holds more than 20 rows."""
    pages = messages.history_pages(None, history_entries(50))
    rows: list[str] = []
    for page in pages:
        table = page.blocks[1]["text"]["text"]
        body = list(table.split("\n")[2:-1])  # fence, header ... fence
        assert len(body) <= 20
        rows += body
    assert len(pages) == 3
    assert sorted(int(row.split()[0]) for row in rows) == list(range(1, 51))


def test_a_flood_of_long_log_lines_is_trimmed_under_the_limits() -> None:
    """A failure with 400 log lines of 1,000 characters stays a valid message: whole lines kept
    from the top, an ellipsis for the rest."""
    lines = tuple(f"[TP{i % 8}] " + "x" * 1000 for i in range(400))
    cause = Cause(FailureKind.CRASH, "load_weights", lines, "the server died")
    view = ProgressView(
        OperationState.FAILED, None, "the server died", 0.3, 60.0, None, None, None, (), 9,
        failure=cause,
    )  # fmt: skip
    watch = Watch("kimi-01", 7, "Resize kimi-01: hicache ratio 4", "U0BEN", "U0ANA")
    notice = messages.notice(("U0BEN", "U0ANA"), watch, view)
    _check_limits(notice.to_json())
    code = notice.blocks[-1]["text"]["text"]
    assert code.count("[TP") >= 2
    assert "…" in code


def test_mentions_use_slack_user_ids() -> None:
    """People are mentioned as <@ID>, so Slack notifies them."""
    made = SAMPLES["notice_ready"]()
    assert isinstance(made, SlackMessage)
    assert re.findall(r"<@(\w+)>", made.text) == ["U0BEN", "U0ANA"]


def test_a_report_over_twenty_hosts_stays_within_slacks_limits() -> None:
    """Twenty hosts (Slack's 50 blocks hold sixteen of them) are cut with an ellipsis block,
    and the fallback text still names every host."""
    busy = report_reply().hosts[0]
    views = tuple(
        replace(busy, report=replace(busy.report, host=f"kimi-{i:02d}")) for i in range(20)
    )
    made = report_messages.report(ReportReply(views)).to_json()
    _check_limits(made)
    assert len(made["blocks"]) == BLOCKS
    assert made["blocks"][-1]["elements"][0]["text"] == "…"
    assert all(f"kimi-{i:02d}:" in made["text"] for i in range(20))


def test_schedules_name_the_zone_their_daily_time_is_read_in() -> None:
    """A daily 09:30 read in Europe/Paris is stored as 08:30 UTC (CET is UTC+1 in December):
    the confirmation and the list show its next run as 09:30 Europe/Paris, never in UTC."""
    made = report_messages.report_scheduled(
        ReportScheduledReply(daily_in_paris(), "daily 09:30", "Europe/Paris")
    )
    listed = report_messages.report_schedules(
        ReportSchedulesReply((daily_in_paris(),), ("daily 09:30",), "Europe/Paris")
    )
    for shown in (made, listed):
        text = json.dumps(shown.to_json())
        assert "2026-12-01 09:30 Europe/Paris" in text
        assert "UTC" not in text


def test_a_name_that_is_no_slack_id_is_never_a_mention() -> None:
    """A proposal by the reports' own name reads 'asked by kimi-ops-reports', not the
    '<@kimi-ops-reports>' Slack shows as an unknown user; a real id is still a mention.
    Failed before the fix: every proposer was wrapped in <@...>."""
    by_name = json.dumps(
        messages.proposal(replace(proposal_reply(), proposed_by="kimi-ops-reports")).to_json()
    )
    assert "asked by kimi-ops-reports" in by_name
    assert "<@kimi-ops-reports>" not in by_name
    by_id = json.dumps(messages.proposal(replace(proposal_reply(), proposed_by="U0BOT")).to_json())
    assert "asked by <@U0BOT>" in by_id


def test_a_rollback_proposal_says_what_it_returns_to_and_asks_for_apply() -> None:
    """The rollback is a proposal like a resize: its head names the history's revision, its
    setting and who applied it; Apply and Cancel carry its id. Failed before the fix: a
    rollback started at once, saying only 'Roll back kimi-01'."""
    target = RollbackTarget(
        revision=7, host="kimi-01", agent_revision=3,
        setting=HiCacheSetting(enabled=True, ratio=4.0), applied_by="U0ANA",
        applied_at=datetime(2026, 12, 1, 14, 2, tzinfo=UTC),
    )  # fmt: skip
    made = messages.proposal(replace(proposal_reply(), rollback=target))
    head = made.blocks[0]["text"]["text"]
    assert head == (
        "*Proposal #12*: Roll back kimi-01 to revision 7: ratio 4 x device pool (applied by "
        "U0ANA on 2026-12-01 14:02 UTC)  (asked by <@U0BEN>)"
    )
    (buttons,) = [b for b in made.blocks if b["type"] == "actions"]
    assert [e["value"] for e in buttons["elements"]] == ["12", "12"]
    assert made.text.startswith("Proposal #12: Roll back kimi-01 to revision 7")
