"""A resize through the systemd backend.

systemd is not PID 1 here: ``tests/agent/fake_systemd/`` provides stand-in ``systemctl`` and
``journalctl`` executables that run the unit's ExecStart (the real simulator, small profile) in
the background and keep its output as the journal. Host facts come from the simulator (SimProbe).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.agent.config import agent_settings_from_config
from bot.agent.control import make_control
from bot.agent.facts import FactsService
from bot.agent.operations import OperationManager
from bot.agent.probe import make_probe
from bot.agent.sglang_client import SGLangClient
from bot.agent.state import AgentState
from bot.clock import SystemClock
from tests.agent._ops_fixtures import free_port, phases, wait_final
from tests.agent.conftest import wait_until

pytestmark = pytest.mark.slow

FAKE = Path(__file__).parent / "fake_systemd"
UNIT = "sglang-ops.service"


@pytest.fixture
def systemd_manager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[OperationManager, SGLangClient]]:
    """An operation manager on the systemd backend over the fake systemctl/journalctl."""
    units, fake_state, sim_state = tmp_path / "units", tmp_path / "fake", tmp_path / "sim"
    for directory in (units, fake_state, sim_state):
        directory.mkdir()
    port = free_port()
    argv = [sys.executable, "-m", "bot.sim", "--model-path", "m", "--tp", "2", "--port",
            str(port), "--mem-fraction-static", "0.7", "--enable-hierarchical-cache",
            "--hicache-ratio", "2"]  # fmt: skip
    (units / UNIT).write_text(
        "[Service]\n"
        "Environment=KIMI_SIM_PROFILE=small-2gpu\n"
        "Environment=KIMI_SIM_SPEED=0.01\n"
        f"Environment=KIMI_SIM_STATE_DIR={sim_state}\n"
        f"Environment=PYTHONPATH={Path(__file__).resolve().parents[2]}\n"
        f"ExecStart={' '.join(argv)}\n"
    )
    # The stand-in executables read where their state lives from the environment.
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(fake_state))
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(units))
    section = {
        "backend": "systemd",
        "unit": UNIT,
        "unit_dir": str(units),
        "systemctl": str(FAKE / "systemctl"),
        "journalctl": str(FAKE / "journalctl"),
        "server_url": f"http://127.0.0.1:{port}",
        "state_dir": str(tmp_path / "agent"),
        "probe": "sim",
        "sim_profile": "small-2gpu",
        "sim_state_dir": str(sim_state),
        "headroom_gb": 0,
        "gpu_free_timeout_s": 5,
        "poll_interval_s": 0.1,
    }
    settings = agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "t"})
    control = make_control(settings)
    client = SGLangClient(settings.server_url, timeout=2.0)
    state = AgentState(settings.state_dir)
    probe = make_probe(settings)
    clock = SystemClock()
    facts = FactsService(settings, probe, control, client, state, clock)
    manager = OperationManager(settings, control, probe, client, state, clock, facts.plan)
    control.start()
    wait_until(lambda: client.health() == 200, timeout_s=60)
    yield manager, client
    manager.close()
    control.stop(5)
    client.close()
    state.close()


def test_resize_through_systemd_reaches_ready(
    systemd_manager: tuple[OperationManager, SGLangClient],
) -> None:
    """Ratio 2 -> 3 through a drop-in, restart and the journal: every phase in order to ready,
    and the restarted server reports ratio 3."""
    manager, client = systemd_manager
    op = manager.submit("resize", actor="ana", ratio=3)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    assert phases(events) == [
        "planned", "stopping", "waiting_gpus", "starting", "init", "load_weights", "kv_pool",
        "cuda_graph", "host_pool", "http", "warmup", "verifying", "ready",
    ]  # fmt: skip
    # small-2gpu at 0.7: 150,000 device tokens x 3 + one page, 35,136 B each.
    assert events[-1].data["host_gb_per_rank"] == round(450_001 * 35_136 / 1e9, 2)
    info = client.server_info()
    assert info is not None
    assert info["hicache_ratio"] == 3
