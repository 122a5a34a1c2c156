"""The start follower's timing on a fake clock: stall and its end, the pin's allowance, the hard
ceiling, the health grace, ready and a served-setting mismatch.

No subprocess and no sleeping: the clock advances only when the follower sleeps, the server's
log is a script of lines released at set seconds (lines from the field notes' logs), the control
backend is an in-memory double that reports the process alive (or dead from a set second), and
SGLang's ``/health`` and ``/server_info`` answer from a script. The real-subprocess scenarios in
``test_manager*.py`` cover the same paths end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.agent.cmdline import HiCacheSetting
from bot.agent.config import AgentSettings, agent_settings_from_config
from bot.agent.control.protocol import LogSource, ServerProcessState, StopResult
from bot.agent.engine.context import RunnerContext, StartOutcome
from bot.agent.engine.follower import StartFollower
from bot.agent.engine.progress import ProgressModel
from bot.agent.engine.watcher import StartWatcher
from bot.agent.state.agent_state import AgentState
from bot.vocab import EventPhase, FailureKind, OperationState, ServerState

T0 = 1_767_000_000.0  # the start's Unix time; the fake clock begins here
POLL_S = 1.0
STALL_S = 30.0
CEILING_S = 900.0

INIT = "[2026-02-24 11:18:37 TP0] Init torch distributed begin.\n"
LOAD = "[2026-02-24 11:18:41 TP0] Load weight begin. avail mem=94.51 GB\n"
KV = "[2026-02-24 11:23:44 TP0] KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB\n"
HOST = "[2026-02-24 11:24:01 TP0] Allocating 44.77 GB host memory for hierarchical KV cache.\n"
HTTP = "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n"
READY = "[2026-02-24 11:26:38] The server is fired up and ready to roll!\n"


class FakeClock:
    """Advances only when slept on (``monotonic`` counts from 0, ``now`` from T0)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> datetime:
        return datetime.fromtimestamp(T0 + self.t, UTC)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


@dataclass
class ScriptedLog(LogSource):
    """The server's output: each line becomes readable at its second."""

    clock: FakeClock
    lines: Sequence[tuple[float, str]]
    _given: int = 0

    def read_new(self) -> str:
        ready = [text for at, text in self.lines if at <= self.clock.t]
        new, self._given = ready[self._given :], len(ready)
        return "".join(new)

    def problem(self) -> str | None:
        return None

    def close(self) -> None:
        return None


@dataclass
class FakeControl:
    """The server process: alive (pid 4242) until ``dies_at`` seconds, if given. Only what the
    follower calls is implemented; the engine's other calls are not made here."""

    clock: FakeClock
    dies_at: float | None = None
    exit_status: int = 1
    name: str = "fake"

    def status(self) -> ServerProcessState:
        if self.dies_at is not None and self.clock.t >= self.dies_at:
            return ServerProcessState(ServerState.FAILED, None, self.exit_status, T0)
        return ServerProcessState(ServerState.RUNNING, 4242, None, T0)

    def stop(self, grace_s: float) -> StopResult:
        raise AssertionError("the follower never stops the server")


@dataclass
class ScriptedSGLang:
    """``/health`` answers ``code`` from ``healthy_at`` seconds (None before: no answer)."""

    clock: FakeClock
    healthy_at: float | None = None
    code: int = 200
    info: dict[str, Any] = field(
        default_factory=lambda: {"enable_hierarchical_cache": True, "hicache_ratio": 4.0,
                                 "hicache_size": 0, "max_total_num_tokens": 159274,
                                 "version": "0.5.9"}
    )  # fmt: skip
    health_calls: list[float] = field(default_factory=list)
    on_health: Callable[[], None] | None = None  # called at each /health, to look around

    def health(self) -> int | None:
        self.health_calls.append(self.clock.t)
        if self.on_health is not None:
            self.on_health()
        if self.healthy_at is None or self.clock.t < self.healthy_at:
            return None
        return self.code

    def server_info(self) -> dict[str, Any] | None:
        return self.info


@dataclass
class Emitted:
    phase: EventPhase
    message: str
    data: dict[str, Any]
    state: OperationState | None
    at: float


@dataclass
class Recorder:
    """The follower's ``emit``: what it emitted, with the fake clock's second."""

    clock: FakeClock
    events: list[Emitted] = field(default_factory=list)

    def __call__(
        self,
        phase: EventPhase,
        message: str,
        data: dict[str, Any] | None = None,
        *,
        step: str | None = None,
        progress: float | None = None,
        state: OperationState | None = None,
    ) -> None:
        self.events.append(Emitted(phase, message, dict(data or {}), state, self.clock.t))

    def phases(self) -> list[EventPhase]:
        return [e.phase for e in self.events]


def _settings(tmp_path: Path) -> AgentSettings:
    section = {
        "command": ["python3", "-m", "sglang.launch_server", "--tp-size", "8"],
        "state_dir": str(tmp_path / "agent"),
        "stall_after_s": STALL_S,
        "hard_ceiling_s": CEILING_S,
        "poll_interval_s": POLL_S,
    }
    return agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "t"})


@dataclass
class Rig:
    clock: FakeClock
    control: FakeControl
    sglang: ScriptedSGLang
    recorder: Recorder
    follower: StartFollower


@pytest.fixture
def make_rig(tmp_path: Path) -> Any:
    """Build a follower over the doubles; ``grace_s`` is the health grace, ``gb`` the expected
    host pool per rank (it sizes the pin's allowance)."""
    states: list[AgentState] = []

    def build(
        *, dies_at: float | None = None, healthy_at: float | None = None, code: int = 200,
        grace_s: float = 20.0, gb: float | None = None, info: dict[str, Any] | None = None,
    ) -> Rig:  # fmt: skip
        clock = FakeClock()
        control = FakeControl(clock, dies_at)
        sglang = ScriptedSGLang(clock, healthy_at, code)
        if info is not None:
            sglang.info = info
        state = AgentState(tmp_path / "agent")
        states.append(state)
        ctx = RunnerContext(
            settings=_settings(tmp_path),
            control=control,  # type: ignore[arg-type]
            probe=None,  # type: ignore[arg-type]  # the follower reads no host facts
            sglang=sglang,
            state=state,
            clock=clock,
            health_grace_s=grace_s,
        )
        recorder = Recorder(clock)
        watcher = StartWatcher(ProgressModel(gb), 8, ratio=4.0, page_size=1)
        follower = StartFollower(
            ctx, recorder, watcher, HiCacheSetting(True, ratio=4), 4242, T0,
            lambda: OperationState.RUNNING,
        )  # fmt: skip
        return Rig(clock, control, sglang, recorder, follower)

    yield build
    for state in states:
        state.close()


def _follow(rig: Rig, lines: Sequence[tuple[float, str]]) -> StartOutcome:
    return rig.follower.run(ScriptedLog(rig.clock, lines))


def test_a_silent_log_is_a_stall_after_stall_after_s_and_ends_when_it_moves(make_rig: Any) -> None:
    """The log silent for longer than stall_after_s while the process lives gives one
    ``stalled`` event (state stalled) at that second, and the next line puts the operation back
    to running; the start then ends ready."""
    rig = make_rig(healthy_at=112.0)
    outcome = _follow(rig, [(0, INIT), (1, LOAD), (100, KV), (110, HTTP), (111, READY)])
    assert outcome.ready
    stalls = [e for e in rig.recorder.events if e.phase is EventPhase.STALLED]
    assert len(stalls) == 1
    assert stalls[0].state is OperationState.STALLED
    # Last move at 1 s: the stall is seen on the first poll after 1 + 30 s.
    assert 1 + STALL_S < stalls[0].at <= 1 + STALL_S + POLL_S
    after = rig.recorder.events[rig.recorder.events.index(stalls[0]) + 1]
    assert after.phase is EventPhase.KV_POOL
    assert after.state is OperationState.RUNNING
    assert after.at == pytest.approx(100, abs=POLL_S)


def test_the_pin_gets_its_expected_length_before_it_counts_as_a_stall(make_rig: Any) -> None:
    """In the host pool phase the allowance is stall_after_s plus the pin's expected length
    (44.77 GB per rank at the default 60 s per 110 GB: about 24 s): a pin silent for 45 s is no
    stall, one silent for 60 s is."""
    pin_s = 44.77 * 60 / 110
    quiet = make_rig(healthy_at=48.0, gb=44.77)
    assert _follow(quiet, [(0, INIT), (1, HOST), (46, HTTP), (47, READY)]).ready
    assert EventPhase.STALLED not in quiet.recorder.phases()
    slow = make_rig(healthy_at=80.0, gb=44.77)
    assert _follow(slow, [(0, INIT), (1, HOST), (78, HTTP), (79, READY)]).ready
    stalls = [e for e in slow.recorder.events if e.phase is EventPhase.STALLED]
    assert len(stalls) == 1
    assert 1 + STALL_S + pin_s < stalls[0].at <= 1 + STALL_S + pin_s + POLL_S


def test_the_hard_ceiling_fails_a_start_that_never_gets_ready(make_rig: Any) -> None:
    """A process that lives but never logs past weights fails with kind timeout just after the
    hard ceiling (measured from the start's Unix time), not before."""
    rig = make_rig()
    outcome = _follow(rig, [(0, INIT), (1, LOAD)])
    assert not outcome.ready
    assert outcome.data["kind"] == FailureKind.TIMEOUT
    assert f"{CEILING_S:.0f} s" in outcome.message
    assert CEILING_S < rig.clock.t <= CEILING_S + POLL_S


def test_health_failing_for_the_grace_after_http_fails_the_start(make_rig: Any) -> None:
    """After HTTP came up, /health answering 503 for longer than the grace fails the start with
    the code and the seconds in the message; it is not failed within the grace."""
    rig = make_rig(healthy_at=0.0, code=503, grace_s=20.0)
    outcome = _follow(rig, [(0, INIT), (5, HTTP)])
    assert not outcome.ready
    assert "/health answered 503 for" in outcome.message
    first_bad = min(t for t in rig.sglang.health_calls if t >= 5)  # counted once HTTP is up
    assert first_bad + 20.0 < rig.clock.t <= first_bad + 20.0 + POLL_S


def test_no_answer_from_health_is_named_as_such(make_rig: Any) -> None:
    """/health never answering after HTTP came up fails with "did not answer", not a code."""
    rig = make_rig(healthy_at=None, grace_s=5.0)
    outcome = _follow(rig, [(0, INIT), (2, HTTP)])
    assert not outcome.ready
    assert "/health did not answer" in outcome.message


def test_ready_needs_health_and_the_applied_setting_and_reports_the_startup_time(
    make_rig: Any,
) -> None:
    """Ready once /health is 200 and /server_info shows ratio 4; the startup time is the fake
    clock's seconds since the start's Unix time, and "verifying" precedes the end."""
    rig = make_rig(healthy_at=50.0)
    outcome = _follow(rig, [(0, INIT), (1, LOAD), (20, KV), (48, HTTP), (49, READY)])
    assert outcome.ready
    assert outcome.data["startup_s"] == pytest.approx(rig.clock.t, abs=0.01)
    assert 50.0 <= rig.clock.t <= 50.0 + POLL_S
    assert outcome.data["device_tokens"] == 159274
    assert rig.recorder.phases()[-1] is EventPhase.VERIFYING


def test_a_server_reporting_another_ratio_fails_as_a_config_mismatch(make_rig: Any) -> None:
    """Up and healthy but /server_info says ratio 2 where 4 was applied: config_mismatch."""
    info = {"enable_hierarchical_cache": True, "hicache_ratio": 2.0, "hicache_size": 0}
    rig = make_rig(healthy_at=10.0, info=info)
    outcome = _follow(rig, [(0, INIT), (9, HTTP), (9.5, READY)])
    assert not outcome.ready
    assert outcome.data["kind"] == FailureKind.CONFIG_MISMATCH
    assert "hicache_ratio=2" in outcome.message


def test_a_process_that_dies_ends_the_start_with_its_exit_status(make_rig: Any) -> None:
    """The process gone at 30 s ends the follow at once (within a poll) as failed, with the
    backend's exit status and the phase it died in."""
    rig = make_rig(dies_at=30.0)
    outcome = _follow(rig, [(0, INIT), (1, LOAD)])
    assert not outcome.ready
    assert outcome.data["exit_status"] == 1
    assert outcome.data["phase"] == EventPhase.LOAD_WEIGHTS
    assert 30.0 <= rig.clock.t <= 30.0 + POLL_S + 1.0  # one poll, then the drain


@dataclass
class MovedLog(ScriptedLog):
    """The log moved away at ``moved_at``: nothing more read by name, the move a problem."""

    moved_at: float = 3.0

    def read_new(self) -> str:
        text = super().read_new()
        return "" if self.clock.t > self.moved_at else text

    def problem(self) -> str | None:
        if self.clock.t > self.moved_at:
            return "the server log /x/server.log was moved or deleted"
        return None


def test_a_log_moved_mid_start_does_not_keep_a_ready_server_from_ready(make_rig: Any) -> None:
    """The log silent from 3 s on (moved away) while /health answers 200 from 60 s: the start
    is ready from the endpoints, the move told once as an event and listed in the engine's
    notices while it lasts, cleared at the end (failed before the fix: /health was asked only
    once the log showed HTTP up, so the start ran to the hard ceiling and was rolled back)."""
    rig = make_rig(healthy_at=60.0)
    seen: list[tuple[str, ...]] = []
    rig.sglang.on_health = lambda: seen.append(rig.follower.ctx.notices.lines())
    lines = [(0, INIT), (1, LOAD), (10, KV), (50, HTTP), (55, READY)]
    outcome = rig.follower.run(MovedLog(rig.clock, lines))
    assert outcome.ready, outcome.message
    assert rig.clock.t < 62
    told = [e for e in rig.recorder.events if "moved or deleted" in e.message]
    assert len(told) == 1
    assert ("the server log /x/server.log was moved or deleted",) in seen
    assert rig.follower.ctx.notices.lines() == ()
