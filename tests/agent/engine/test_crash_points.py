"""An agent killed at any point of a resize resumes it to the end it would have reached, and the
server is started exactly once: every :class:`CrashPoint`, on both backends.

The real simulator runs the server; the systemd backend runs over the stand-in ``systemctl`` and
``journalctl`` of ``tests/agent/fake_systemd/`` (systemd is not PID 1 here). A crash is
``CrashAt(point)`` given to the composition root: the engine raises there as a SIGKILL would stop
it (nothing after the point runs, the server keeps running); a second agent is then built on the
same state directory, as a restarted one would be.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from bot.agent.config import AgentSettings
from bot.agent.control.process import ProcessControl
from bot.agent.engine.crash_points import CrashAt, CrashPoint
from bot.agent.service import AgentService, build_service
from bot.agent.sglang_client import SGLangClient
from bot.errors import KimiOpsError
from bot.vocab import OperationKind, OperationState
from tests.agent._ops_fixtures import free_port, harness_factory, sim_command, wait_final
from tests.agent.engine.test_manager_systemd import SystemdRig, systemd_rig

__all__ = ["harness_factory", "systemd_rig"]

pytestmark = pytest.mark.slow

SMALL = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache")


@dataclass
class Rig:
    """What the test needs of either backend's rig: settings, the first server, and how many
    times the server was started (the simulator's own count, not the agent's)."""

    settings: AgentSettings
    start_server: Callable[[], int]
    starts: Callable[[], int]


@pytest.fixture(params=["process", "systemd"])
def rig(
    request: pytest.FixtureRequest,
    harness_factory: Callable[..., Any],
    systemd_rig: Callable[..., SystemdRig],
) -> Rig:
    """A server on the process backend (starts counted in its log) or on systemd (counted by
    the stand-in systemctl)."""
    if request.param == "process":
        harness = harness_factory(sim_command(free_port(), *SMALL, "--hicache-ratio", "2"))
        return Rig(
            harness.settings,
            harness.start_server,
            lambda: harness.log_text().count("server_args="),
        )
    built = systemd_rig()
    return Rig(built.settings, built.start_server, built.starts)


@pytest.fixture
def services() -> Iterator[Callable[..., AgentService]]:
    """Build agents on a rig's settings; close them all afterwards (the server keeps running)."""
    made: list[AgentService] = []

    def build(settings: AgentSettings, **parts: Any) -> AgentService:
        service = build_service(
            settings, sglang=SGLangClient(settings.server_url, timeout=2.0), **parts
        )
        made.append(service)
        return service

    yield build
    for service in made:
        service.close()
    for service in made:
        # Stopped through each control, so the one that spawned the server reaps its child
        # (a Popen collected while its process runs would warn).
        with contextlib.suppress(KimiOpsError):
            service.control.stop(5)
        if isinstance(service.control, ProcessControl):
            service.control.release()


@pytest.mark.parametrize("point", list(CrashPoint))
def test_a_crash_at_any_point_resumes_to_ready_with_one_start(
    point: CrashPoint, rig: Rig, services: Callable[..., AgentService]
) -> None:
    """Crashed at ``point`` during a resize (ratio 2 -> 3), a new agent on the same state
    resumes the operation to ready, the event list has no gap and no repeated step, and the
    server was started once for the resize."""
    rig.start_server()
    starts_before = rig.starts()
    crash = CrashAt(point)
    first = services(rig.settings, crash_points=crash)
    op = first.submit(OperationKind.RESIZE, actor="ana", ratio=3)
    assert first.manager.join(op.id, timeout_s=120), "the crashed runner thread did not end"
    assert crash.crashed, f"{point} was never reached"
    assert first.get(op.id).state is not OperationState.READY
    first.close()

    second = services(rig.settings)
    assert second.resume() == [op.id]
    final = wait_final(second.manager, op.id)
    events = second.state.events(op.id)
    assert final.state is OperationState.READY, events[-1].message
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    steps = [e.data["step"] for e in events if "step" in e.data]
    assert len(steps) == len(set(steps)), steps
    assert rig.starts() == starts_before + 1, f"started {rig.starts() - starts_before} times"
    served = second.sglang.server_info()
    assert served is not None
    assert served["hicache_ratio"] == 3
