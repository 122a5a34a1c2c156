"""The watcher against a scripted agent: pages the real agent can send, in the order that once
made a watch end before the store had recorded the operation's end.

The agent (``GET /v1/operations/{id}``) reads an operation's events, then the operation: the
final event and the final state are written together, so a page can carry the final state with
the events up to the one before the final event. The pages here are the field notes' host going
to ratio 4 (``tests/fixtures/agent_events/resize_ratio4_ready.json``), served by an
``httpx.MockTransport`` as the agent would split them, into a real store migrated by Alembic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.agent_json import AgentOperation
from bot.chat.agent_client import AgentClient
from bot.chat.audit import Watch
from bot.chat.store_audit import StoreAudit
from bot.chat.watcher import Watcher
from bot.clock import SystemClock
from bot.settings import Secret
from bot.store import Store
from bot.vocab import EventPhase, OperationState
from tests.chat._core_fixtures import RecordingFrontEnd, migrated_store

_FIXTURE = Path(__file__).parents[1] / "fixtures" / "agent_events" / "resize_ratio4_ready.json"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with migrated_store(tmp_path) as the_store:
        yield the_store


def _ready_page() -> dict[str, Any]:
    page: dict[str, Any] = json.loads(_FIXTURE.read_text(encoding="utf-8"))
    # No agent revision: the store records the operation alone, with no /v1/revisions to ask.
    page["operation"]["revision"] = None
    return page


def _torn_agent(page: dict[str, Any], requests: list[int]) -> httpx.MockTransport:
    """The agent of ``page``: asked for the events after SEQ, it answers the final state with
    every event but the final one (read before it was written), then the final event."""
    events = page["events"]
    final_seq = events[-1]["seq"]

    def answer(request: httpx.Request) -> httpx.Response:
        after = int(request.url.params["after"])
        requests.append(after)
        shown = [e for e in events if after < e["seq"] < final_seq] or [
            e for e in events if e["seq"] > after
        ]
        body = {
            "id": page["id"],
            "state": page["state"],
            "operation": page["operation"],
            "events": shown,
            "last_seq": shown[-1]["seq"] if shown else after,
        }
        return httpx.Response(200, json=body)

    return httpx.MockTransport(answer)


def test_a_final_state_ahead_of_its_final_event_waits_for_the_event(store: Store) -> None:
    """A page with the final state but not the final event does not end the watch: the next
    poll brings the event, the store records the end, and the people hear 'ready' once, with
    the view built from the ready event."""
    page = _ready_page()
    running = {**page["operation"], "state": OperationState.RUNNING.value, "finished_at": None}
    watch = Watch("kimi-01", page["id"], "Resize kimi-01: hicache ratio 4", "ben", "ana")
    audit = StoreAudit(store, lambda host: {"revisions": []})
    audit.record_operation(watch, AgentOperation.from_json(running), None, "terminal")
    front, requests = RecordingFrontEnd(), []
    transport = _torn_agent(page, requests)
    with AgentClient("http://agent", Secret("t"), "kimi-01", transport=transport) as client:
        watcher = Watcher(watch, client, front, audit, SystemClock(), 0.0, retry_s=0.01)
        watcher.start()
        ended = watcher.done.wait(60)
        watcher.stop()
    assert ended, "the watcher did not end within 60 s"
    final_seq = page["events"][-1]["seq"]
    assert requests == [0, final_seq - 1]
    assert watcher.final is not None
    assert watcher.final.state is OperationState.READY
    record = store.operation_by_agent_id("kimi-01", page["id"])
    assert record is not None
    assert record.finished_at is not None
    assert record.state is OperationState.READY
    stored = store.operation_events(record.id)
    assert [event.seq for event in stored] == list(range(1, final_seq + 1))
    noticed = [(view.state, view.phase) for _, _, view in front.notices]
    assert noticed == [(OperationState.READY, EventPhase.READY)]
