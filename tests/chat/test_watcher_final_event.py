"""A watcher ends with the operation's final event, not with the first page showing a final
state: the agent reads an operation's events, then the operation, so a page can say "ready"
without the event that ends it (seen with the agent killed and resumed mid-operation)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import httpx

from bot.agent_json import AgentEvent, AgentOperation
from bot.chat.agent_client import AgentClient
from bot.chat.audit import Audit, Watch
from bot.chat.progress import ProgressView
from bot.chat.watcher import Watcher
from bot.clock import SystemClock
from bot.settings import Secret
from tests.chat._core_fixtures import RecordingFrontEnd

_READY = Path(__file__).parent.parent / "fixtures" / "agent_events" / "resize_ratio4_ready.json"


class _AuditRecord:
    """What the watcher hands the audit, in order (the watcher calls only these two)."""

    def __init__(self) -> None:
        self.stored: list[int] = []
        self.finished_at_seq: list[int] = []

    def record_events(self, watch: Watch, events: Sequence[AgentEvent]) -> None:
        self.stored.extend(event.seq for event in events)

    def finish(self, watch: Watch, operation: AgentOperation, view: ProgressView) -> None:
        self.finished_at_seq.append(self.stored[-1])


def test_a_final_state_without_its_final_event_is_followed_to_that_event() -> None:
    """The agent (scripted over MockTransport, as the race needs exact timing) first answers
    "ready" with every event but the last; the watcher polls again from there, stores the
    final event, and finishes once, after it."""
    whole: dict[str, Any] = json.loads(_READY.read_text(encoding="utf-8"))
    events: list[dict[str, Any]] = whole["events"]
    racing = [events[:-1]]  # the first page: the state is final, the final event not yet in
    asked: list[int] = []

    def agent(request: httpx.Request) -> httpx.Response:
        after = int(request.url.params["after"])
        asked.append(after)
        batch = racing.pop() if racing else [e for e in events if e["seq"] > after]
        last = batch[-1]["seq"] if batch else after
        body = {**whole, "events": batch, "last_seq": last}
        return httpx.Response(200, json=body)

    record = _AuditRecord()
    client = AgentClient("http://agent", Secret("t0ken"), transport=httpx.MockTransport(agent))
    watch = Watch("kimi-01", whole["id"], "Resize kimi-01: hicache ratio 4", "ben", "ana")
    watcher = Watcher(
        watch, client, RecordingFrontEnd(), cast(Audit, record), SystemClock(), 1.0, 0.1, 0.05
    )
    watcher.start()
    assert watcher.done.wait(20), "the watcher did not end"
    client.close()
    last = events[-1]["seq"]
    assert asked[:2] == [0, last - 1]
    assert record.stored == list(range(1, last + 1))
    assert record.finished_at_seq == [last]
    assert watcher.final is not None
