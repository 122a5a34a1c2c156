"""The operation scenarios through the systemd backend: a resize to ready, a refusal before
anything stops, a start dying of host memory rolled back through the drop-in, an agent restarted
mid-start, and a leftover GPU process blocking the start.

systemd is not PID 1 here: ``tests/agent/fake_systemd/`` provides stand-in ``systemctl`` and
``journalctl`` executables that run the unit's ExecStart (the real simulator, small profile) in
the background and keep its output as the journal. Host facts come from the simulator (SimProbe).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.agent.cmdline import read_hicache
from bot.agent.config import AgentSettings, agent_settings_from_config
from bot.agent.control.protocol import ServerControl
from bot.agent.control.systemd import DROP_IN_NAME, parse_exec_start
from bot.agent.engine.manager import OperationManager
from bot.agent.facts.snapshot import FactsService
from bot.agent.service import build_service, make_control, make_probe
from bot.agent.sglang_client import SGLangClient
from bot.agent.state.agent_state import AgentState
from bot.clock import SystemClock
from bot.errors import PlanRefused
from bot.planner import ChangeRequest
from tests.agent._ops_fixtures import _kill_simulators, free_port, phases, wait_final
from tests.agent.conftest import Spawn, wait_until

pytestmark = pytest.mark.slow

FAKE = Path(__file__).parents[1] / "fake_systemd"
UNIT = "sglang-ops.service"
REPO = Path(__file__).resolve().parents[3]
SIM_PROFILES = REPO / "bot" / "sim" / "profiles"

# small-2gpu at --mem-fraction-static 0.7: 150,000 device tokens of 35,136 B (the profile).
DEVICE_TOKENS = 150_000
BYTES_PER_TOKEN = 35_136


@dataclass
class SystemdRig:
    """One unit over the fake systemctl/journalctl and one agent's settings on a tmp dir;
    ``manager()`` builds a (new) manager on them, as a restarted agent would."""

    tmp: Path
    settings: AgentSettings
    unit_env: dict[str, str]
    managers: list[OperationManager] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)

    @property
    def fake_state(self) -> Path:
        return self.tmp / "fake"

    def control(self) -> ServerControl:
        return make_control(self.settings)

    def client(self) -> SGLangClient:
        client = SGLangClient(self.settings.server_url, timeout=2.0)
        self.closers.append(client.close)
        return client

    def manager(self) -> OperationManager:
        """A manager with its own control, client and state connection on this rig."""
        state = AgentState(self.settings.state_dir)
        self.closers.append(state.close)
        service = build_service(self.settings, sglang=self.client(), state=state)
        self.managers.append(service.manager)
        return service.manager

    def start_server(self) -> int:
        """Start the unit as written and wait for health 200; returns its MainPID."""
        control, client = self.control(), self.client()
        control.start("test:1")
        wait_until(lambda: client.health() == 200 or not control.status().running, 60)
        assert client.health() == 200, self.journal()[-2000:]
        pid = control.status().main_pid
        assert pid is not None
        return pid

    def add_drop_in(self, name: str, text: str) -> None:
        """Write a drop-in of the operator's own beside the agent's (read at the next start)."""
        directory = self.settings.unit_dir / f"{UNIT}.d"
        directory.mkdir(exist_ok=True)
        (directory / name).write_text(text)

    def starts(self) -> int:
        """How many times the fake systemctl started the unit (its own record)."""
        return len(json.loads((self.fake_state / f"{UNIT}.json").read_text())["starts"])

    def calls(self) -> list[str]:
        """The fake systemctl's invocations, one ``verb args`` line each."""
        return (self.fake_state / "calls.log").read_text().splitlines()

    def journal(self) -> str:
        try:
            return (self.fake_state / f"{UNIT}.journal").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def drop_in_argv(self, name: str = DROP_IN_NAME) -> list[str]:
        """The ExecStart the agent's drop-in (or the kept previous one) sets."""
        path = self.settings.unit_dir / f"{UNIT}.d" / name
        value = path.read_text().splitlines()[-1].partition("=")[2]
        return parse_exec_start(value)


def _build(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], **agent: Any
) -> SystemdRig:
    units, fake_state, sim_state = tmp / "units", tmp / "fake", tmp / "sim"
    for directory in (units, fake_state, sim_state):
        directory.mkdir()
    port = free_port()
    argv = [sys.executable, "-m", "bot.sim", "--model-path", "m", "--tp", "2", "--port",
            str(port), "--mem-fraction-static", "0.7", "--enable-hierarchical-cache",
            "--hicache-ratio", "2"]  # fmt: skip
    unit_env = {
        "KIMI_SIM_PROFILE": "small-2gpu",
        "KIMI_SIM_TIME_SCALE": "0.01",
        "KIMI_SIM_VERSION": "0.5.9",
        "KIMI_SIM_STATE_DIR": str(sim_state),
        "PYTHONPATH": str(REPO),
        **env,
    }
    lines = [f"Environment={name}={value}" for name, value in unit_env.items()]
    (units / UNIT).write_text("\n".join(["[Service]", *lines, f"ExecStart={' '.join(argv)}", ""]))
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
        "state_dir": str(tmp / "agent"),
        "probe": "sim",
        "sim_profile": unit_env["KIMI_SIM_PROFILE"],
        "sim_state_dir": str(sim_state),
        "headroom_gb": 0,
        "stop_grace_s": 10,
        "gpu_free_timeout_s": 5,
        "poll_interval_s": 0.05,
        **agent,
    }
    settings = agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "t"})
    return SystemdRig(tmp, settings, unit_env)


@pytest.fixture
def systemd_rig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., SystemdRig]]:
    """Build a rig (``env``: the unit's extra Environment=, keywords: [agent] overrides); once
    per test. Afterwards close every manager, stop the unit and kill its simulators."""
    made: list[SystemdRig] = []

    def build(env: dict[str, str] | None = None, **agent: Any) -> SystemdRig:
        assert not made, "one rig per test: the fake systemd's state is per test"
        rig = _build(tmp_path, monkeypatch, env or {}, **agent)
        made.append(rig)
        return rig

    yield build
    for rig in made:
        for manager in rig.managers:
            manager.close(timeout_s=10)
        with contextlib.suppress(Exception):
            rig.control().stop(5)
        for close in rig.closers:
            close()
    _kill_simulators(tmp_path)


def test_resize_through_systemd_reaches_ready(systemd_rig: Callable[..., SystemdRig]) -> None:
    """Ratio 2 -> 3 through a drop-in, restart and the journal: every phase in order to ready,
    and the restarted server reports ratio 3."""
    rig = systemd_rig()
    rig.start_server()
    manager = rig.manager()
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
    info = rig.client().server_info()
    assert info is not None
    assert info["hicache_ratio"] == 3


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
    rig = systemd_rig({"KIMI_SIM_PROFILE": str(path)})
    rig.start_server()
    monkeypatch.setenv("FAKE_JOURNAL_LAG_S", "0.6")  # read by the journalctl the agent runs
    manager = rig.manager()
    op = manager.submit("resize", actor="ana", ratio=3)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    assert phases(events)[-5:] == ["host_pool", "http", "warmup", "verifying", "ready"]
    assert events[-1].data["host_gb_per_rank"] == round(450_001 * BYTES_PER_TOKEN / 1e9, 2)


def test_oversized_request_is_refused_before_anything_stops(
    systemd_rig: Callable[..., SystemdRig],
) -> None:
    """2 x 300 GB on the simulated 60 GB host is refused with the Plan: the unit keeps its
    MainPID, is not started again, no drop-in is written and no operation or revision is
    recorded."""
    rig = systemd_rig()
    pid = rig.start_server()
    manager = rig.manager()
    with pytest.raises(PlanRefused) as refused:
        manager.submit("resize", actor="ben", size_gb=300)
    plan = refused.value.plan
    assert plan is not None
    assert plan.total_gb == pytest.approx(2 * 300, rel=1e-3)  # type: ignore[attr-defined]
    assert rig.control().status().main_pid == pid
    assert rig.starts() == 1
    assert [c for c in rig.calls() if c.split()[0] in ("stop", "kill", "daemon-reload")] == []
    assert not (rig.settings.unit_dir / f"{UNIT}.d" / DROP_IN_NAME).exists()
    assert manager.recent(10) == []
    assert manager.revisions() == []


def test_start_dying_of_host_memory_rolls_back_through_the_drop_in(
    systemd_rig: Callable[..., SystemdRig],
) -> None:
    """A size the planner allows (no headroom) but SGLang 0.5.23 refuses at start dies with the
    host-memory ValueError in the journal; the agent writes the previous config back into the
    drop-in and ends rolled_back, cause host_memory with the decisive line, serving ratio 2."""
    rig = systemd_rig({"KIMI_SIM_VERSION": "0.5.23"})
    rig.start_server()
    manager = rig.manager()
    # small-2gpu: 60 GB available; 2 ranks x 24 GB fit the planner's budget without headroom,
    # but SGLang 0.5.23 splits (available - 10 GiB) over the ranks after the new server's own
    # RAM is taken: less than 24 GB per rank.
    op = manager.submit("resize", actor="ana", size_gb=24)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "rolled_back", events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == "host_memory"
    assert any("Not enough host memory available" in line for line in final.failure["lines"])
    assert "rolling_back" in phases(events)
    assert events[-1].data["cause"]["kind"] == "host_memory"
    assert rig.starts() == 3  # the first server, the refused size, the rollback
    # The drop-in holds the old config again; the refused one is kept as the previous.
    assert read_hicache(rig.drop_in_argv()).ratio == 2
    assert read_hicache(rig.drop_in_argv(DROP_IN_NAME + ".previous")).size_gb == 24
    info = rig.client().server_info()
    assert info is not None
    assert info["hicache_ratio"] == 2
    assert not info["hicache_size"]


def test_agent_restart_mid_start_resumes_to_ready_with_one_start(
    systemd_rig: Callable[..., SystemdRig],
) -> None:
    """A new manager on the same state dir (the old one closed while weights load, the unit
    still starting) re-attaches through the journal, ends ready with a gap-free event list and
    no repeated step, and the unit was started once for the operation."""
    rig = systemd_rig()
    rig.start_server()
    # A slower pin for the new start only (15.81 GB per rank at 2 GB/s x 0.01 x 40 = 3.2 s
    # more), so the close below surely lands before ready.
    rig.add_drop_in("10-slow-pin.conf", "[Service]\nEnvironment=KIMI_SIM_FAIL=slow_pin:40\n")
    first = rig.manager()
    op = first.submit("resize", actor="ana", ratio=3)

    def loading() -> bool:
        return any(e.phase == "load_weights" for e in first.state.events(op.id))

    wait_until(loading, timeout_s=60)
    first.close()
    assert first.get(op.id).state == "running"
    second = rig.manager()
    assert second.resume() == [op.id]
    final = wait_final(second, op.id)
    events = second.state.events(op.id)
    assert final.state == "ready", events[-1].message
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    steps = [e.data["step"] for e in events if "step" in e.data]
    assert len(steps) == len(set(steps))
    assert phases(events)[-3:] == ["warmup", "verifying", "ready"]
    assert rig.starts() == 2  # the first server + one start for the operation
    info = rig.client().server_info()
    assert info is not None
    assert info["hicache_ratio"] == 3


def test_leftover_gpu_process_blocks_the_start_naming_its_pid(
    systemd_rig: Callable[..., SystemdRig], spawn: Spawn
) -> None:
    """A stray scheduler (``python -m bot.sim.stray``) holding the GPUs makes the operation fail
    after the stop without starting the unit, naming the stray's PID."""
    rig = systemd_rig(gpu_free_timeout_s=1)
    rig.start_server()
    env = {**os.environ, **rig.unit_env}
    stray = spawn(sys.executable, "-m", "bot.sim.stray", "--gpus", "0,1", env=env,
                  stdout=subprocess.DEVNULL)  # fmt: skip
    probe = make_probe(rig.settings)

    def held() -> bool:
        return any(p.pid == stray.pid for g in probe.gpus().gpus for p in g.processes)

    wait_until(held, timeout_s=30)
    manager = rig.manager()
    op = manager.submit("restart", actor="ana")
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert f"PID {stray.pid}" in events[-1].message
    assert "starting" not in phases(events)
    assert not rig.control().status().running
    assert rig.starts() == 1  # never started again


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
