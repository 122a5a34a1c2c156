"""How the terminal and Slack end a live change: with what it did, not a start's figures."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from bot.agent_json import AgentEvent
from bot.chat.audit import Watch
from bot.chat.progress import progress_view
from bot.slack import messages
from bot.terminal.wording import final_line
from bot.vocab import EventPhase, OperationState

T0 = datetime(2026, 12, 1, tzinfo=UTC)
DONE = "attach storage backend file: live, no restart (waited 0.4 s for the server to be idle)"
WATCH = Watch("kimi-01", 7, "Live HiCache change on kimi-01", None, "U0ANA")


def _events() -> list[AgentEvent]:
    phases = [EventPhase.PLANNED, EventPhase.WAITING_IDLE, EventPhase.APPLYING,
              EventPhase.VERIFYING]  # fmt: skip
    events = [
        AgentEvent(i + 1, T0 + timedelta(seconds=i / 10), phase, phase.value, 0.0, {})
        for i, phase in enumerate(phases)
    ]
    done = AgentEvent(5, T0 + timedelta(seconds=0.6), EventPhase.READY, DONE, 1.0, {})
    return [*events, done]


def test_a_live_change_ends_with_its_own_words_on_both_surfaces() -> None:
    """The terminal's last line and the Slack message say what the live change did, with no
    '?' figures of a start that never happened."""
    view = progress_view(_events(), OperationState.READY)
    assert final_line(WATCH, view) == [f"READY kimi-01: {DONE}"]
    slack = json.dumps(messages.progress(WATCH, view).blocks)
    assert "Startup" not in slack
    assert "?" not in slack
