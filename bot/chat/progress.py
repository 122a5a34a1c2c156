"""An operation's events in, the progress view a person reads out; and the update throttle.

Pure: the events are the agent's (``GET /v1/operations/{id}``), time is passed in. For the event
list of a ratio-4 resize on the field notes' host, mid-way::

    progress_view(events[:40], OperationState.RUNNING, now=...)
    -> ProgressView(phase=LOAD_WEIGHTS, shard=(33, 64), progress=0.49, eta_s=23.5,
                    done=(PhaseDone(STOPPING, 0.5 s), PhaseDone(WAITING_GPUS, 0.0 s), ...))

and at the end ``final`` holds the figures of the ``ready`` event: device tokens, host tokens and
GB per rank as logged (beside the planned GB), total, startup time. A rollback starts a second
attempt: ``rollback`` keeps the cause and its decisive log lines, and phases are counted afresh.

The throttle (:class:`UpdateThrottle`) lets through at most one view per ``interval_s`` for an
operation, plus at once every phase change, every state change and the final state.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.agent_json import AgentEvent
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, FailureKind, OperationState

__all__ = [
    "BAR_WIDTH",
    "Cause",
    "FinalFigures",
    "PhaseDone",
    "ProgressView",
    "UpdateThrottle",
    "progress_view",
]

BAR_WIDTH = 20
# Phases that end an attempt rather than being a step of it.
_ENDS = frozenset(
    {EventPhase.READY, EventPhase.ROLLED_BACK, EventPhase.FAILED, EventPhase.ROLLING_BACK}
)


@dataclass(frozen=True)
class PhaseDone:
    """A phase of the current attempt that is over, and how long it took."""

    phase: EventPhase
    seconds: float
    data: Mapping[str, Any] = field(default_factory=dict)  # its last event's figures


@dataclass(frozen=True)
class Cause:
    """Why a start failed: the agent's classification and SGLang's decisive lines."""

    kind: FailureKind
    phase: str | None
    lines: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class FinalFigures:
    """What the server reached, from the log (GB = 1e9 bytes)."""

    device_tokens: int | None
    host_tokens_per_rank: int | None
    host_gb_per_rank: float | None  # as logged
    planned_gb_per_rank: float | None  # as planned
    ranks: int | None
    host_gb_total: float | None
    startup_s: float | None


@dataclass(frozen=True)
class ProgressView:
    """Everything a front end draws for one operation at one moment."""

    state: OperationState
    phase: EventPhase | None
    message: str
    progress: float
    elapsed_s: float
    eta_s: float | None
    shard: tuple[int, int] | None
    graphs: tuple[int, int] | None
    done: tuple[PhaseDone, ...]
    last_seq: int
    stalled: bool = False
    rollback: Cause | None = None
    failure: Cause | None = None
    final: FinalFigures | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL_OPERATION_STATES

    @property
    def percent(self) -> int:
        return int(self.progress * 100)

    @property
    def bar(self) -> str:
        """``[#########-----------]``: the progress in BAR_WIDTH cells."""
        filled = min(BAR_WIDTH, int(self.progress * BAR_WIDTH))
        return "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "]"


def progress_view(
    events: Sequence[AgentEvent],
    state: OperationState,
    now: datetime | None = None,
    planned_gb_per_rank: float | None = None,
    failure: Mapping[str, Any] | None = None,
) -> ProgressView:
    """The view of an operation in ``state`` whose events so far are ``events`` (in seq order).

    ``now`` moves elapsed and ETA on between events (default: the last event's time);
    ``failure`` is the operation's own ``failure`` body, used when the events hold no cause.
    """
    if not events:
        return ProgressView(state, None, "", 0.0, 0.0, None, None, None, (), 0)
    first, last = events[0], events[-1]
    at = now if now is not None and now >= last.at else last.at
    attempt = _current_attempt(events)
    rollback = _rollback_cause(events)
    cause = rollback or _cause(failure, "")
    final_event = last if last.phase in (EventPhase.READY, EventPhase.ROLLED_BACK) else None
    return ProgressView(
        state=state,
        phase=last.phase,
        message=last.message,
        progress=last.progress,
        elapsed_s=round((at - first.at).total_seconds(), 1),
        eta_s=_eta(events, at, state),
        shard=_counter(attempt, EventPhase.LOAD_WEIGHTS, "shard", "shards"),
        graphs=_counter(attempt, EventPhase.CUDA_GRAPH, "graph", "graphs"),
        done=_phases_done(attempt),
        last_seq=last.seq,
        stalled=state is OperationState.STALLED,
        rollback=rollback,
        failure=cause if state is OperationState.FAILED else None,
        final=_final(attempt, final_event, planned_gb_per_rank),
    )


def _current_attempt(events: Sequence[AgentEvent]) -> list[AgentEvent]:
    """The events since the last rollback began (all of them when there was none)."""
    start = 0
    for index, event in enumerate(events):
        if event.phase is EventPhase.ROLLING_BACK:
            start = index + 1
    return list(events[start:])


def _cause(body: Mapping[str, Any] | None, message: str) -> Cause | None:
    if not body or "kind" not in body:
        return None
    try:
        kind = FailureKind(str(body["kind"]))
    except ValueError:
        kind = FailureKind.UNKNOWN
    phase = body.get("phase")
    return Cause(
        kind=kind,
        phase=None if phase is None else str(phase),
        lines=tuple(str(line) for line in body.get("lines") or ()),
        message=message,
    )


# The agent's rolling_back sentence names its own revision number ("...; rolling back to
# revision 3 (ratio 2 x device pool)"), which is no number of the bot's history: the view keeps
# the config and drops the number (history shows the rollback with the bot's own).
_AGENT_REVISION = re.compile(r"rolling back to revision \d+ \((?P<config>[^)]*)\)")


def _rollback_cause(events: Sequence[AgentEvent]) -> Cause | None:
    for event in reversed(events):
        if event.phase is EventPhase.ROLLING_BACK:
            message = _AGENT_REVISION.sub(r"rolling back to \g<config>", event.message)
            return _cause(event.data.get("cause"), message)
    return None


def _eta(events: Sequence[AgentEvent], at: datetime, state: OperationState) -> float | None:
    """The agent's last ETA, less the time since it was given (never below 0)."""
    if state in FINAL_OPERATION_STATES:
        return None
    for event in reversed(events):
        eta = event.data.get("eta_s")
        if isinstance(eta, int | float):
            return max(0.0, round(eta - (at - event.at).total_seconds(), 1))
    return None


def _counter(
    attempt: Sequence[AgentEvent], phase: EventPhase, done_key: str, total_key: str
) -> tuple[int, int] | None:
    for event in reversed(attempt):
        if event.phase is phase and total_key in event.data:
            return int(event.data[done_key]), int(event.data[total_key])
    return None


def _phases_done(attempt: Sequence[AgentEvent]) -> tuple[PhaseDone, ...]:
    """Each phase that a later phase followed, with the time from its first event to the next
    phase's first event."""
    starts: list[tuple[EventPhase, AgentEvent, AgentEvent]] = []  # phase, first, last event
    for event in attempt:
        if starts and starts[-1][0] is event.phase:
            starts[-1] = (event.phase, starts[-1][1], event)
        else:
            starts.append((event.phase, event, event))
    done: list[PhaseDone] = []
    for (phase, begin, last), (_next, next_begin, _) in itertools.pairwise(starts):
        if phase in _ENDS or phase is EventPhase.STALLED:
            continue
        seconds = round((next_begin.at - begin.at).total_seconds(), 1)
        done.append(PhaseDone(phase, seconds, dict(last.data)))
    return tuple(done)


def _final(
    attempt: Sequence[AgentEvent], end: AgentEvent | None, planned: float | None
) -> FinalFigures | None:
    if end is None:
        return None
    data = end.data
    total = None
    for event in reversed(attempt):
        if event.phase is EventPhase.HOST_POOL and "host_gb_total" in event.data:
            total = float(event.data["host_gb_total"])
            break
    gb = _float(data.get("host_gb_per_rank"))
    ranks = _int(data.get("ranks"))
    if total is None and gb is not None and ranks is not None:
        total = round(gb * ranks, 2)
    return FinalFigures(
        device_tokens=_int(data.get("device_tokens")),
        host_tokens_per_rank=_int(data.get("host_tokens_per_rank")),
        host_gb_per_rank=gb,
        planned_gb_per_rank=planned,
        ranks=ranks,
        host_gb_total=total,
        startup_s=_float(data.get("startup_s")),
    )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None


class UpdateThrottle:
    """Decides which views of one operation are shown: at most one per ``interval_s`` (on the
    monotonic seconds passed in), but at once the first view, a phase or state change and the
    final state. A view held back stays pending until :meth:`due` lets it out."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last_at: float | None = None
        self._last: ProgressView | None = None
        self._pending: ProgressView | None = None

    def offer(self, view: ProgressView, monotonic_s: float) -> ProgressView | None:
        """``view`` if it should be shown now, else None (and it is kept as pending)."""
        shown = self._last
        urgent = (
            shown is None
            or view.finished
            or view.state is not shown.state
            or view.phase is not shown.phase
            or self._last_at is None
            or monotonic_s - self._last_at >= self.interval_s
        )
        if urgent:
            return self._show(view, monotonic_s)
        self._pending = view
        return None

    def due(self, monotonic_s: float) -> ProgressView | None:
        """The pending view once the interval since the last shown one has passed."""
        if self._pending is None or self._last_at is None:
            return None
        if monotonic_s - self._last_at < self.interval_s:
            return None
        return self._show(self._pending, monotonic_s)

    def _show(self, view: ProgressView, monotonic_s: float) -> ProgressView:
        self._last, self._last_at, self._pending = view, monotonic_s, None
        return view
