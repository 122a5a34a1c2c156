"""The start follower when the agent runs out of file descriptors: it retries and says so.

The doubles of ``test_follower`` (fake clock, scripted log, control and ``/health``); here the
log and the process status fail with ``EMFILE`` for a while, as the process backend's do when
the agent's descriptor table is full.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.agent.cmdline import HiCacheSetting
from bot.agent.control.protocol import ServerProcessState
from bot.agent.engine.context import RunnerContext
from bot.agent.engine.follower import StartFollower
from bot.agent.engine.progress import ProgressModel
from bot.agent.engine.watcher import StartWatcher
from bot.agent.state.agent_state import AgentState
from bot.errors import BackendError
from bot.vocab import OperationState
from tests.agent.engine.test_follower import (
    HTTP,
    INIT,
    KV,
    LOAD,
    READY,
    T0,
    FakeClock,
    FakeControl,
    Recorder,
    ScriptedLog,
    ScriptedSGLang,
    _settings,
)

# The seconds during which every open() of the agent fails.
OUT_FROM, OUT_UNTIL = 10.0, 40.0


def _emfile(what: str) -> BackendError:
    error = BackendError(f"cannot read {what}: [Errno 24] Too many open files")
    error.__cause__ = OSError(errno.EMFILE, "Too many open files")
    return error


def _out(clock: FakeClock) -> bool:
    return OUT_FROM <= clock.t < OUT_UNTIL


@dataclass
class StarvedLog(ScriptedLog):
    def read_new(self) -> str:
        if _out(self.clock):
            raise _emfile("the server log")
        return super().read_new()


@dataclass
class StarvedControl(FakeControl):
    def status(self) -> ServerProcessState:
        if _out(self.clock):
            raise _emfile("server.json")
        return super().status()


def test_a_start_followed_through_descriptor_exhaustion_ends_ready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """EMFILE from the log and the process status for 30 s of a start: the follower retries,
    logs it (once a minute at most, not on every turn) and ends ready with no line lost.
    Failed before the fix: the first EMFILE ended the operation as failed."""
    clock = FakeClock()
    state = AgentState(tmp_path / "agent")
    ctx = RunnerContext(
        settings=_settings(tmp_path),
        control=StarvedControl(clock),  # type: ignore[arg-type]
        probe=None,  # type: ignore[arg-type]  # the follower reads no host facts
        sglang=ScriptedSGLang(clock, healthy_at=50.0),  # type: ignore[arg-type]
        state=state,
        clock=clock,
        health_grace_s=20.0,
    )
    recorder = Recorder(clock)
    follower = StartFollower(
        ctx, recorder, StartWatcher(ProgressModel(None), 8, ratio=4.0, page_size=1),
        HiCacheSetting(True, ratio=4), 4242, T0, lambda: OperationState.RUNNING,
    )  # fmt: skip
    lines = [(0, INIT), (1, LOAD), (20, KV), (48, HTTP), (49, READY)]
    try:
        with caplog.at_level(logging.WARNING, logger="bot.agent.engine.follower"):
            outcome = follower.run(StarvedLog(clock, lines))
    finally:
        state.close()
    assert outcome.ready, outcome.message
    assert outcome.data["device_tokens"] == 159274  # the KV line, written while starved
    warnings = [r.getMessage() for r in caplog.records if "file descriptors" in r.getMessage()]
    assert 1 <= len(warnings) <= 2  # one per kind of read, not one per turn
    assert all("retrying" in warning for warning in warnings)
