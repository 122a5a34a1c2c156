"""One thread per running operation: long-poll the agent, record the events, hand views on.

A watcher asks the agent for the operation's events after the last seq it has (the agent keeps
them, so nothing is lost across a reconnect or a bot restart), stores the new ones through the
:class:`~bot.chat.audit.Audit`, builds the :class:`~bot.chat.progress.ProgressView` and passes it
through the throttle to the front end. When the state becomes stalled, rolling back or final, the
people involved are notified. An agent that stops answering is reported once ("unreachable since
HH:MM") and polled again every ``retry_s``; watching goes on until the operation ends or the
watcher is stopped. It ends with the operation's final event, not with the first page that
shows a final state (the agent may answer that state before the event that carries the end).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from bot.agent_json import AgentEvent, OperationPage
from bot.chat.agent_client import AgentClient
from bot.chat.audit import Audit, Watch
from bot.chat.progress import ProgressView, UpdateThrottle, progress_view
from bot.chat.replies import FrontEnd
from bot.clock import Clock
from bot.errors import AgentError, KimiOpsError
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationState

__all__ = ["NOTIFY_STATES", "Watcher", "WatcherPool"]

log = logging.getLogger(__name__)

#: States the people involved are told about (besides the throttled progress).
NOTIFY_STATES = frozenset(
    {
        OperationState.STALLED,
        OperationState.ROLLING_BACK,
        OperationState.READY,
        OperationState.FAILED,
        OperationState.ROLLED_BACK,
    }
)


class Watcher:
    """Watches ``watch`` until its operation ends; :meth:`start` runs it in a daemon thread."""

    def __init__(
        self,
        watch: Watch,
        client: AgentClient,
        front: FrontEnd,
        audit: Audit,
        clock: Clock,
        interval_s: float,
        poll_wait_s: float = 20.0,
        retry_s: float = 2.0,
    ) -> None:
        self.watch = watch
        self._client = client
        self._front = front
        self._audit = audit
        self._clock = clock
        self._throttle = UpdateThrottle(interval_s)
        self._poll_wait_s = poll_wait_s
        self._retry_s = retry_s
        self._events: list[AgentEvent] = []
        self._stored_seq = watch.last_seq
        self._state: OperationState | None = None
        self._unreachable_since: datetime | None = None
        self._stop = threading.Event()
        self.done = threading.Event()
        self.final: ProgressView | None = None
        self._thread = threading.Thread(
            target=self.run, name=f"watch-{watch.host}-{watch.operation_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop watching (the operation goes on at the agent); waits for the current poll."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                page = self._poll()
                if page is None:
                    self._stop.wait(self._retry_s)
                    continue
                if self._take(page):
                    return
        except KimiOpsError:
            log.exception(
                "watching %s operation %s failed", self.watch.host, self.watch.operation_id
            )
        finally:
            self.done.set()

    def _poll(self) -> OperationPage | None:
        after = self._events[-1].seq if self._events else 0
        try:
            page = self._client.events(self.watch.operation_id, after, self._poll_wait_s)
        except AgentError:
            if self._unreachable_since is None:
                self._unreachable_since = self._clock.now()
                self._front.unreachable(self.watch, self._unreachable_since)
            self._flush()
            return None
        self._unreachable_since = None
        return page

    def _take(self, page: OperationPage) -> bool:
        """Record and show one page; True once the operation has ended."""
        self._events.extend(page.events)
        new = [event for event in page.events if event.seq > self._stored_seq]
        if new:
            self._audit.record_events(self.watch, new)
            self._stored_seq = new[-1].seq
        operation = page.operation
        # A page can span several phases: each phase change is shown, not only the last view.
        start = len(self._events) - len(page.events)
        for end in range(start + 1, len(self._events)):
            if self._events[end].phase is not self._events[end - 1].phase:
                self._offer(self._view(end, self._state_before(end, operation.state), None))
        ended = self._ended(operation.state)
        state = operation.state if ended else self._state_before(len(self._events), operation.state)
        failure = None if operation.failure is None or not ended else operation.failure.raw
        view = self._view(len(self._events), state, failure)
        self._offer(view)
        if state is not self._state:
            self._state = state
            if state in NOTIFY_STATES:
                people = tuple(
                    dict.fromkeys(p for p in (self.watch.proposed_by, self.watch.applied_by) if p)
                )
                self._front.notify(people, self.watch, view)
        if ended:
            self._audit.finish(self.watch, operation, view)
            self.final = view
            return True
        return False

    def _ended(self, state: OperationState) -> bool:
        """Whether the operation has ended with its final event in hand.

        The agent reads a page's events before its operation, so a page can show the final
        state without the final event, written a moment later in the same transaction as that
        state. The audit records the end from that event: until it is here the watch goes on
        (the next poll returns it at once).
        """
        return (
            state in FINAL_OPERATION_STATES
            and bool(self._events)
            and self._events[-1].phase.value == state.value
        )

    def _state_before(self, count: int, now: OperationState) -> OperationState:
        """The state an earlier view of this page had: the operation's own, unless it has
        ended since (then running, or rolling back once a rollback began)."""
        if now not in FINAL_OPERATION_STATES:
            return now
        if any(event.phase is EventPhase.ROLLING_BACK for event in self._events[:count]):
            return OperationState.ROLLING_BACK
        return OperationState.RUNNING

    def _view(
        self, count: int, state: OperationState, failure: Mapping[str, Any] | None
    ) -> ProgressView:
        return progress_view(
            self._events[:count],
            state,
            now=self._clock.now(),
            planned_gb_per_rank=self.watch.planned_gb_per_rank,
            failure=failure,
        )

    def _offer(self, view: ProgressView) -> None:
        shown = self._throttle.offer(view, self._clock.monotonic())
        if shown is not None:
            self._front.progress(self.watch, shown)

    def _flush(self) -> None:
        pending = self._throttle.due(self._clock.monotonic())
        if pending is not None:
            self._front.progress(self.watch, pending)


class WatcherPool:
    """At most one watcher per (host, operation); finished watchers are dropped."""

    def __init__(self, make: Callable[[Watch], Watcher]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._watchers: dict[tuple[str, int], Watcher] = {}

    def ensure(self, watch: Watch) -> Watcher:
        """The watcher of ``watch``'s operation, started if there was none."""
        key = (watch.host, watch.operation_id)
        with self._lock:
            current = self._watchers.get(key)
            if current is not None and not current.done.is_set():
                return current
            watcher = self._make(watch)
            self._watchers[key] = watcher
            watcher.start()
            return watcher

    def find(self, watch: Watch) -> Watcher | None:
        """The watcher of ``watch``'s operation, running or finished, if there is one."""
        with self._lock:
            return self._watchers.get((watch.host, watch.operation_id))

    def running(self) -> list[Watcher]:
        with self._lock:
            return [w for w in self._watchers.values() if not w.done.is_set()]

    def stop_all(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            watchers = list(self._watchers.values())
        for watcher in watchers:
            watcher.stop(timeout_s)
