"""A page of an operation's events never shows the operation ended without its final event: the
end is committed as the operation's state and its last event in one transaction, and the page
must read them in an order that keeps them together (real SQLite state; no server is started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.agent.service import build_service, make_control
from bot.agent.state import AgentState, ProgressEvent
from bot.vocab import EventPhase, OperationKind, OperationState
from tests.agent._ops_fixtures import free_port, make_settings, sim_command

NOW = "2026-03-02T09:00:00.000+00:00"


class _EndsBetweenReads(AgentState):
    """The real state, except that the operation ends (its ready event and state, committed
    together) right after the first read of its events: the moment a follower's page races."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir)
        self.ending: int | None = None

    def events(self, op_id: int, after: int = 0) -> list[ProgressEvent]:
        read = super().events(op_id, after)
        if self.ending == op_id:
            self.ending = None
            self.append_event(op_id, at=NOW, phase=EventPhase.READY, message="ready",
                              progress=1.0, state=OperationState.READY)  # fmt: skip
        return read


def test_a_page_that_shows_the_end_holds_the_final_event(tmp_path: Path) -> None:
    """Following an operation that ends between the reads of one page, the follower stops on a
    page whose events include the ready event, never one event short."""
    settings = make_settings(tmp_path, sim_command(free_port()))
    state = _EndsBetweenReads(settings.state_dir)
    op_id = state.create_operation(kind=OperationKind.RESIZE, actor="ana", created_at=NOW,
                                   request={"ratio": 4}, plan=None)  # fmt: skip
    state.append_event(op_id, at=NOW, phase=EventPhase.LOAD_WEIGHTS, message="loading",
                       progress=0.5)  # fmt: skip
    service = build_service(settings, control=make_control(settings), state=state)
    try:
        state.ending = op_id
        seen: list[Any] = []
        after = 0
        for _ in range(5):
            view, events = service.manager.wait_events(op_id, after, 0)
            seen += events
            after = events[-1].seq if events else after
            if view.finished:
                break
        assert view.finished
        assert view.state == OperationState.READY
        assert [event.phase for event in seen] == [EventPhase.LOAD_WEIGHTS, EventPhase.READY]
    finally:
        service.close()
