"""An agent killed at any point of an operation resumes it to the end it would have reached, and
each config is started exactly once: every :class:`CrashPoint` of a resize that comes up, and
every point of a failed resize's rollback, on both backends.

The real simulator runs the server; the systemd backend runs over the stand-in ``systemctl`` and
``journalctl`` of ``tests/agent/fake_systemd/`` (systemd is not PID 1 here; see
``tests/agent/engine/_backends.py``). A crash is ``CrashAt(point, stage)`` given to the
composition root: the engine raises there as a SIGKILL would stop it (nothing after the point
runs, the server keeps running); a second agent is then built on the same state directory, as a
restarted one would be.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bot.agent.config import AgentSettings
from bot.agent.control.process import ProcessControl
from bot.agent.engine.crash_points import APPLY_POINTS, ROLLBACK_POINTS, CrashAt, CrashPoint
from bot.agent.service import AgentService, build_service
from bot.agent.sglang_client import SGLangClient
from bot.agent.state.resume_point import Stage
from bot.agent.state.views import OperationView, ProgressEvent
from bot.errors import KimiOpsError
from bot.vocab import FailureKind, OperationKind, OperationState
from tests.agent._ops_fixtures import wait_final
from tests.agent.engine._backends import BackendRig, backend_rig, harness_factory, systemd_rig

__all__ = ["backend_rig", "harness_factory", "systemd_rig"]

pytestmark = pytest.mark.slow


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


def _crash_and_resume(
    settings: AgentSettings,
    services: Callable[..., AgentService],
    crash: CrashAt,
    **request: Any,
) -> tuple[AgentService, OperationView, list[ProgressEvent]]:
    """Submit a resize to an agent that crashes at ``crash``, then resume it on a fresh agent on
    the same state; the fresh agent, the final view and the events."""
    first = services(settings, crash_points=crash)
    op = first.submit(OperationKind.RESIZE, actor="ana", **request)
    assert first.manager.join(op.id, timeout_s=120), "the crashed runner thread did not end"
    assert crash.crashed, f"{crash.stage}:{crash.point} was never reached"
    assert not first.get(op.id).finished
    first.close()

    second = services(settings)
    assert second.resume() == [op.id]
    final = wait_final(second.manager, op.id)
    events = second.state.events(op.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    steps = [e.data["step"] for e in events if "step" in e.data]
    assert len(steps) == len(set(steps)), steps
    return second, final, events


@pytest.mark.parametrize(("stage", "point"), APPLY_POINTS, ids=lambda v: str(v))
def test_a_crash_at_any_point_resumes_to_ready_with_one_start(
    stage: Stage,
    point: CrashPoint,
    backend_rig: Callable[..., BackendRig],
    services: Callable[..., AgentService],
) -> None:
    """Crashed at ``point`` during a resize (ratio 2 -> 3), a new agent on the same state
    resumes the operation to ready, the event list has no gap and no repeated step, and the
    server was started once for the resize."""
    rig = backend_rig()
    rig.start_server()
    starts_before = rig.starts()
    second, final, events = _crash_and_resume(
        rig.settings, services, CrashAt(point, stage), ratio=3
    )
    assert final.state is OperationState.READY, events[-1].message
    assert rig.starts() == starts_before + 1, f"started {rig.starts() - starts_before} times"
    served = second.sglang.server_info()
    assert served is not None
    assert served["hicache_ratio"] == 3


@pytest.mark.parametrize(("stage", "point"), ROLLBACK_POINTS, ids=lambda v: str(v))
def test_a_crash_while_rolling_back_resumes_to_rolled_back_with_one_start_each(
    stage: Stage,
    point: CrashPoint,
    backend_rig: Callable[..., BackendRig],
    services: Callable[..., AgentService],
) -> None:
    """Crashed at ``point`` after a resize failed (24 GB per rank, which SGLang 0.5.23 refuses
    on the 60 GB host once its own RAM is taken) or during its rollback, a new agent on the same
    state ends the operation rolled back with the host-memory cause, one rollback revision that
    became ready, the failed config started once and the old one (ratio 2) started once."""
    rig = backend_rig(env={"KIMI_SIM_VERSION": "0.5.23"})
    rig.start_server()
    starts_before = rig.starts()
    second, final, events = _crash_and_resume(
        rig.settings, services, CrashAt(point, stage), size_gb=24
    )
    assert final.state is OperationState.ROLLED_BACK, events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == FailureKind.HOST_MEMORY
    assert [e.phase for e in events].count("rolling_back") == 1
    # Two starts since the first server: the refused size, then the old config, once each.
    assert rig.starts() == starts_before + 2, f"started {rig.starts() - starts_before} times"
    rollbacks = [
        r for r in second.revisions() if r.operation_id == final.id and r.kind == "rollback"
    ]
    assert len(rollbacks) == 1, rollbacks
    assert rollbacks[0].became_ready
    assert final.rollback_of == final.revision
    served = second.sglang.server_info()
    assert served is not None
    assert served["hicache_ratio"] == 2
    assert not served["hicache_size"]
