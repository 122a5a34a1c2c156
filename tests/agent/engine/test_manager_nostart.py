"""Operations whose start never begins, or whose agent fails, after the server was stopped: the
operation and its revision end failed with the cause, and the message says the server is
stopped (the real simulator, process backend and SQLite; NVML and a refusing backend are stood
in for behind the same Protocols)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import pytest

from bot.agent.control.protocol import LogSource, ServerControl, ServerProcessState, StopResult
from bot.agent.engine.manager import OperationManager
from bot.agent.facts.snapshot import FactsService
from bot.agent.host.probe import GpuFacts, HostProbe, ProcessInfo, RamFacts, ServerCgroup
from bot.agent.service import make_probe
from bot.agent.state import OperationView
from bot.clock import SystemClock
from bot.errors import BackendError, GpuProbeError
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

SMALL = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache", "--hicache-ratio", "2")


class _LostGpuProbe:
    """The simulator's probe, except that NVML fails as on a GPU that fell off the bus (this
    machine has no GPU, so NVML is stood in for)."""

    def __init__(self, inner: HostProbe) -> None:
        self.inner = inner

    def ram(self, server: ServerCgroup | None = None) -> RamFacts:
        return self.inner.ram(server)

    def gpus(self) -> GpuFacts:
        raise GpuProbeError("NVML nvmlDeviceGetComputeRunningProcesses on GPU 1: GPU is lost")

    def released_by_stop(self, pid: int, ram: RamFacts) -> int:
        return self.inner.released_by_stop(pid, ram)

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        return self.inner.stray_server_processes(exclude_pids)


class _Control:
    """The real process backend, except that ``start`` fails as systemd can refuse a start
    (``refuse``) or ``stop`` breaks with an error nobody planned for (``crash``)."""

    def __init__(self, inner: ServerControl, refuse: bool = False, crash: bool = False) -> None:
        self.inner = inner
        self.refuse = refuse
        self.crash = crash
        self.starts = 0

    def read_command(self) -> list[str]:
        return self.inner.read_command()

    def write_command(self, argv: Sequence[str]) -> None:
        self.inner.write_command(argv)

    def previous_command(self) -> list[str] | None:
        return self.inner.previous_command()

    def start(self, marker: str) -> None:
        self.starts += 1
        if self.refuse:
            raise BackendError("systemctl start kimi-sglang.service failed: unit is masked")
        self.inner.start(marker)

    def started(self, marker: str) -> bool:
        return self.inner.started(marker)

    def stop(self, grace_s: float) -> StopResult:
        result = self.inner.stop(grace_s)
        if self.crash:
            raise RuntimeError("stop broke after stopping")
        return result

    def kill(self) -> StopResult:
        return self.inner.kill()

    def status(self) -> ServerProcessState:
        return self.inner.status()

    def cgroup(self) -> ServerCgroup:
        return self.inner.cgroup()

    def open_log(self, since: float | None = None) -> LogSource:
        return self.inner.open_log(since)

    def last_run_key(self) -> str | None:
        return self.inner.last_run_key()

    def last_run_log(self, max_bytes: int) -> str:
        return self.inner.last_run_log(max_bytes)


def _restart(harness: Harness, probe: HostProbe | None, control: _Control) -> OperationView:
    """Run a restart with the runner's probe and control replaced; returns the final view."""
    _, state, client = harness.parts()
    real_probe = make_probe(harness.settings)
    clock = SystemClock()
    facts = FactsService(harness.settings, real_probe, control, client, state, clock)
    manager = OperationManager(
        harness.settings, control, probe or real_probe, client, state, clock, facts.plan
    )
    harness.managers.append(manager)
    op = manager.submit("restart", actor="ana")
    return wait_final(manager, op.id)


def _check_failed(harness: Harness, final: OperationView, kind: str, words: str) -> str:
    """The operation failed with ``kind`` and the cause; its revision failed; the last event's
    message is returned."""
    state = harness.parts()[1]
    events = state.events(final.id)
    assert final.state == "failed", events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == kind
    assert words in final.failure["message"]
    revision = state.revision(final.revision or 0)
    assert revision is not None
    assert revision.outcome == "failed"
    assert not harness.parts()[0].status().running
    return events[-1].message


def test_a_lost_gpu_after_the_stop_fails_without_starting(
    harness_factory: Callable[..., Harness],
) -> None:
    """NVML failing ("GPU is lost") while waiting for the GPUs ends the operation failed with
    kind "gpu_probe", never starts the server, and says the server is stopped."""
    harness = harness_factory(sim_command(free_port(), *SMALL))
    harness.start_server()
    control = _Control(harness.parts()[0])
    final = _restart(harness, _LostGpuProbe(make_probe(harness.settings)), control)
    message = _check_failed(harness, final, "gpu_probe", "GPU is lost")
    assert final.failure is not None
    assert set(final.failure) == {"kind", "message"}  # no log lines: no server ran
    assert "GPU is lost" in message
    assert "the server is stopped" in message
    assert control.starts == 0


def test_a_refused_start_fails_with_the_backends_reason(
    harness_factory: Callable[..., Harness],
) -> None:
    """The backend refusing the start ends the operation failed with kind "backend" and its
    message, and says the server is stopped."""
    harness = harness_factory(sim_command(free_port(), *SMALL))
    harness.start_server()
    final = _restart(harness, None, _Control(harness.parts()[0], refuse=True))
    message = _check_failed(harness, final, "backend", "unit is masked")
    assert final.failure is not None
    assert set(final.failure) == {"kind", "message"}
    assert "unit is masked" in message
    assert "the server is stopped" in message


def test_an_unexpected_error_still_fails_the_revision_and_says_where_the_server_is(
    harness_factory: Callable[..., Harness],
) -> None:
    """An error nobody planned for (a bug) ends the operation failed with failure data, the
    revision failed (not pending), and the message says the server is stopped."""
    harness = harness_factory(sim_command(free_port(), *SMALL))
    harness.start_server()
    final = _restart(harness, None, _Control(harness.parts()[0], crash=True))
    message = _check_failed(harness, final, "agent_error", "stop broke")
    assert "the server is stopped" in message
