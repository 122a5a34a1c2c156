"""What only the systemd backend does: read a journal that lags behind the server, and plan on
the pools a stopped unit's last run logged in its journal. The scenarios both backends share are
in ``test_manager.py`` and ``test_runner_recovery.py``.

systemd is not PID 1 here: ``tests/agent/fake_systemd/`` provides stand-in ``systemctl`` and
``journalctl`` executables that run the unit's ExecStart (the real simulator, small profile) in
the background and keep its output as the journal (see ``tests/agent/engine/_backends.py``).
Host facts come from the simulator (SimProbe).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.agent.facts.snapshot import FactsService
from bot.agent.service import make_probe
from bot.agent.state.agent_state import AgentState
from bot.clock import SystemClock
from bot.planner import ChangeRequest
from tests.agent._ops_fixtures import phases, wait_final
from tests.agent.engine._backends import REPO, SystemdRig, systemd_rig

__all__ = ["systemd_rig"]

pytestmark = pytest.mark.slow

SIM_PROFILES = REPO / "bot" / "sim" / "profiles"

# small-2gpu at --mem-fraction-static 0.7: 150,000 device tokens of 35,136 B (the profile).
DEVICE_TOKENS = 150_000
BYTES_PER_TOKEN = 35_136


def test_a_lagging_journal_still_gives_every_phase_before_ready(
    systemd_rig: Callable[..., SystemdRig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the journal 0.6 s behind the server (FAKE_JOURNAL_LAG_S, as a busy journald is) and
    0.3 s between "Uvicorn running" and the warmup request, /health answers 200 before the
    warmup line arrives; the operation still lists every phase in order before verifying."""
    profile = json.loads((SIM_PROFILES / "small-2gpu.json").read_text())
    profile["phase_seconds"]["http"] = 30.0  # x time scale 0.01 = 0.3 s
    path = tmp_path / "slow-http.json"
    path.write_text(json.dumps(profile))
    rig = systemd_rig(profile=str(path))
    rig.start_server()
    monkeypatch.setenv("FAKE_JOURNAL_LAG_S", "0.6")  # read by the journalctl the agent runs
    manager = rig.manager()
    op = manager.submit("resize", actor="ana", ratio=3)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    assert phases(events)[-5:] == ["host_pool", "http", "warmup", "verifying", "ready"]
    assert events[-1].data["host_gb_per_rank"] == round(450_001 * BYTES_PER_TOKEN / 1e9, 2)


def test_a_stopped_units_pools_come_from_its_journal(
    systemd_rig: Callable[..., SystemdRig],
) -> None:
    """A unit the agent never started, now stopped: a ratio still plans, on the device pool its
    last run logged in the journal (150,000 tokens of 35,136 B at 0.7 on small-2gpu)."""
    rig = systemd_rig()
    rig.start_server()
    rig.control().stop(5)
    state = AgentState(rig.settings.state_dir)
    rig.closers.append(state.close)
    client = rig.client()
    facts = FactsService(
        rig.settings, make_probe(rig.settings), rig.control(), client, state, SystemClock()
    )
    capacity = facts.snapshot().capacity
    assert capacity.source == "startup_log"
    assert capacity.device_tokens == DEVICE_TOKENS
    plan, _ = facts.plan(ChangeRequest(ratio=3))
    # int(150,000 x 3) + one page = 450,001 tokens per rank.
    assert plan.per_rank_tokens == 450_001
