"""Progress views and the update throttle, on event lists a real agent produced.

The fixtures were recorded from ``kimi-ops agent`` driving the simulator (``tests/chat/conftest``):
``resize_ratio4_ready.json`` is the field notes' host going from ratio 2 to ratio 4;
``resize_size24_host_memory_rolled_back.json`` is the small 2-GPU host on SGLang 0.5.23 refusing
24 GB per rank at start, rolled back to ratio 2.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.agent_json import AgentEvent
from bot.chat.progress import BAR_WIDTH, ProgressView, UpdateThrottle, progress_view
from bot.vocab import EventPhase, FailureKind, OperationState

FIXTURES = Path(__file__).parents[1] / "fixtures" / "agent_events"
# The field notes' figures (README): ratio 4 on 159,274 device tokens is 637,097 host tokens per
# rank (x4 plus one page), 44.75 GB per rank as planned and 44.77 GB as SGLang logs it.
DEVICE_TOKENS = 159_274
HOST_TOKENS = DEVICE_TOKENS * 4 + 1


def _page(name: str) -> dict[str, Any]:
    page: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return page


def _events(name: str) -> list[AgentEvent]:
    return [AgentEvent.from_json(event) for event in _page(name)["events"]]


READY = _events("resize_ratio4_ready")
ROLLED = _events("resize_size24_host_memory_rolled_back")


def _at(raw: str) -> datetime:
    return datetime.fromisoformat(raw)


def test_a_view_mid_load_shows_the_shard_progress_and_phases_done() -> None:
    """Mid-way through loading: phase, shard n/N from the last shard event, the agent's progress,
    elapsed since the first event, and the phases before with their durations."""
    upto = next(i for i, e in enumerate(READY) if e.data.get("shard") == 33) + 1
    view = progress_view(READY[:upto], OperationState.RUNNING)
    raw = _page("resize_ratio4_ready")["events"][:upto]
    assert view.phase is EventPhase.LOAD_WEIGHTS
    assert view.shard == (33, 64)
    assert view.progress == raw[-1]["progress"]
    assert view.elapsed_s == pytest.approx(
        (_at(raw[-1]["at"]) - _at(raw[0]["at"])).total_seconds(), abs=0.05
    )
    phases = [done.phase for done in view.done]
    assert phases == [
        EventPhase.PLANNED,
        EventPhase.STOPPING,
        EventPhase.WAITING_GPUS,
        EventPhase.STARTING,
        EventPhase.INIT,
    ]
    first_of = {}
    for event in raw:
        first_of.setdefault(event["phase"], _at(event["at"]))
    stopping = (first_of["waiting_gpus"] - first_of["stopping"]).total_seconds()
    assert view.done[1].seconds == pytest.approx(stopping, abs=0.05)
    assert view.done[2].data["stop_s"] == raw[2]["data"]["stop_s"]
    assert not view.finished


def test_the_bar_fills_with_the_progress() -> None:
    """The bar has BAR_WIDTH cells, filled in proportion to the progress."""
    upto = next(i for i, e in enumerate(READY) if e.progress >= 0.45) + 1
    view = progress_view(READY[:upto], OperationState.RUNNING)
    assert len(view.bar) == BAR_WIDTH + 2
    assert view.bar.count("#") == int(view.progress * BAR_WIDTH)
    assert view.percent == int(view.progress * 100)


def test_eta_counts_down_from_the_agents_last_estimate() -> None:
    """Five seconds after an event that estimated E seconds, the ETA reads E - 5."""
    upto = 40
    last = READY[upto - 1]
    eta = float(last.data["eta_s"])
    view = progress_view(READY[:upto], OperationState.RUNNING, now=last.at + timedelta(seconds=5))
    assert view.eta_s == pytest.approx(eta - 5, abs=0.05)
    assert view.elapsed_s == pytest.approx((last.at - READY[0].at).total_seconds() + 5, abs=0.05)


def test_the_final_view_holds_the_figures_of_the_ready_start() -> None:
    """At ready: device and host tokens, GB per rank logged beside planned, the total over the
    ranks and the startup time, all from the log; no ETA."""
    view = progress_view(READY, OperationState.READY, planned_gb_per_rank=44.754)
    assert view.finished
    assert view.progress == 1.0
    assert view.eta_s is None
    final = view.final
    assert final is not None
    assert final.device_tokens == DEVICE_TOKENS
    assert final.host_tokens_per_rank == HOST_TOKENS
    assert final.host_gb_per_rank == pytest.approx(44.77, abs=0.005)
    assert final.planned_gb_per_rank == pytest.approx(44.75, abs=0.005)
    assert final.ranks == 8
    assert final.host_gb_total == pytest.approx(44.77 * 8, abs=0.1)
    assert final.startup_s == READY[-1].data["startup_s"]
    assert EventPhase.HOST_POOL in [done.phase for done in view.done]


def test_a_rollback_keeps_its_cause_and_counts_the_second_start_afresh() -> None:
    """Rolled back: the cause is host_memory with SGLang's decisive line, the final figures are
    the restored start's, and the phases done are the second attempt's only."""
    view = progress_view(ROLLED, OperationState.ROLLED_BACK)
    assert view.rollback is not None
    assert view.rollback.kind is FailureKind.HOST_MEMORY
    assert view.rollback.phase == "cuda_graph"
    assert any("Not enough host memory available" in line for line in view.rollback.lines)
    assert view.failure is None
    assert view.final is not None
    assert view.final.host_gb_per_rank == ROLLED[-1].data["host_gb_per_rank"]
    phases = [done.phase for done in view.done]
    assert phases[0] is EventPhase.STOPPING
    assert EventPhase.PLANNED not in phases
    assert phases.count(EventPhase.LOAD_WEIGHTS) == 1


def test_the_rollback_cause_names_the_config_not_the_agent_s_revision_number() -> None:
    """The agent says 'rolling back to revision 3 (ratio 2 x device pool)', 3 being its own
    number; the view says 'rolling back to ratio 2 x device pool'. Failed before the fix: the
    agent's number reached Slack and the terminal beside the history's different ones."""
    view = progress_view(ROLLED, OperationState.ROLLED_BACK)
    assert view.rollback is not None
    assert view.rollback.message.endswith("; rolling back to ratio 2 x device pool")
    assert "revision" not in view.rollback.message


def test_mid_rollback_the_view_shows_the_cause_and_the_new_start() -> None:
    """While rolling back, the view already carries the cause; shard counting restarts."""
    upto = next(i for i, e in enumerate(ROLLED) if e.phase is EventPhase.ROLLING_BACK)
    upto = next(i for i, e in enumerate(ROLLED) if i > upto and e.phase is EventPhase.LOAD_WEIGHTS)
    view = progress_view(ROLLED[: upto + 2], OperationState.ROLLING_BACK)
    assert view.rollback is not None
    assert view.shard == (0, 4)


def test_a_failed_operation_shows_the_failure_from_its_body() -> None:
    """A failure with no rollback event takes its cause from the operation's failure body."""
    body = {"kind": "gpu_memory", "phase": "kv_pool", "lines": ["torch.OutOfMemoryError: CUDA"]}
    view = progress_view(READY[:75], OperationState.FAILED, failure=body)
    assert view.failure is not None
    assert view.failure.kind is FailureKind.GPU_MEMORY
    assert view.failure.lines == ("torch.OutOfMemoryError: CUDA",)


def test_a_stalled_operation_says_so() -> None:
    """A stall event in a stalled operation marks the view stalled, with the agent's message."""
    stall = AgentEvent(
        seq=READY[60].seq + 1,
        at=READY[60].at + timedelta(seconds=300),
        phase=EventPhase.STALLED,
        message="no progress for 300 s in load_weights; the server process lives",
        progress=READY[60].progress,
        data={},
    )
    view = progress_view([*READY[:61], stall], OperationState.STALLED)
    assert view.stalled
    assert "no progress for 300 s" in view.message
    assert view.shard == (READY[60].data["shard"], 64)


def test_no_events_is_an_empty_view() -> None:
    """Before the first event the view is empty, not an error."""
    view = progress_view([], OperationState.RUNNING)
    assert view.phase is None
    assert view.progress == 0.0
    assert view.last_seq == 0


def _replay(interval_s: float, step_s: float) -> list[ProgressView]:
    """Offer the ready run's views one event every ``step_s`` on a fake monotonic clock."""
    throttle = UpdateThrottle(interval_s)
    shown: list[ProgressView] = []
    for index in range(1, len(READY) + 1):
        now = index * step_s
        view = progress_view(
            READY[:index],
            OperationState.READY if index == len(READY) else OperationState.RUNNING,
        )
        out = throttle.offer(view, now)
        if out is not None:
            shown.append(out)
    return shown


def test_the_throttle_shows_every_phase_change_and_the_end_but_few_repeats() -> None:
    """With events every 0.5 s and a 3 s interval: the first view, each phase's first view and
    the final one are shown, and two views of the same phase are at least 3 s apart."""
    shown = _replay(interval_s=3.0, step_s=0.5)
    phases = [event.phase for event in READY]
    changes = [i for i in range(len(phases)) if i == 0 or phases[i] is not phases[i - 1]]
    shown_seqs = {view.last_seq for view in shown}
    assert {READY[i].seq for i in changes} <= shown_seqs
    assert shown[-1].state is OperationState.READY
    for before, after in itertools.pairwise(shown):
        if after.phase is before.phase and not after.finished:
            assert (after.last_seq - before.last_seq) * 0.5 >= 3.0
    assert len(shown) < len(READY) / 2


def test_a_held_back_view_is_shown_once_the_interval_passes() -> None:
    """A view held back is returned by due() only after the interval, and only once."""
    throttle = UpdateThrottle(3.0)
    first = progress_view(READY[:8], OperationState.RUNNING)
    later = progress_view(READY[:9], OperationState.RUNNING)
    assert throttle.offer(first, 10.0) is first
    assert throttle.offer(later, 11.0) is None
    assert throttle.due(12.9) is None
    assert throttle.due(13.0) is later
    assert throttle.due(20.0) is None
