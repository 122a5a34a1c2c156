"""The operation engine's test harness: the real simulator as the server (process backend), the
simulator's host facts (SimProbe), real SQLite state, and the API's FactsService as the planner."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from bot.agent.config import AgentSettings, agent_settings_from_config
from bot.agent.control.process import ProcessControl
from bot.agent.control.protocol import ServerControl
from bot.agent.engine.manager import OperationManager
from bot.agent.service import build_service, make_control
from bot.agent.sglang_client import SGLangClient
from bot.agent.state import AgentState, OperationView, ProgressEvent
from tests._ports import free_port as free_port

# Real time at this scale: a small-profile start takes well under a second, the Kimi one ~7 s.
FAST = "0.01"


def sim_command(port: int, *flags: str, tp: int = 2) -> list[str]:
    return [sys.executable, "-m", "bot.sim", "--model-path", "/models/m", "--tp", str(tp),
            "--port", str(port), *flags]  # fmt: skip


@dataclass
class Harness:
    """One agent's pieces on one tmp dir; ``manager()`` builds a (new) manager on them."""

    tmp: Path
    settings: AgentSettings
    managers: list[OperationManager] = field(default_factory=list)
    clients: list[SGLangClient] = field(default_factory=list)
    controls: list[ServerControl] = field(default_factory=list)

    def parts(self, fresh: bool = False) -> tuple[ServerControl, AgentState, SGLangClient]:
        """Control, state and client; ``fresh`` gives a new control, as a restarted agent has
        (otherwise the harness's first one, which reaps the children it started)."""
        if fresh or not self.controls:
            self.controls.append(make_control(self.settings))
        control = self.controls[-1]
        state = AgentState(self.settings.state_dir)
        client = SGLangClient(self.settings.server_url, timeout=2.0)
        self.clients.append(client)
        return control, state, client

    def manager(self, fresh: bool = False, sglang: Any = None, **kwargs: Any) -> OperationManager:
        """A manager composed by the agent's own root on this harness; ``sglang`` replaces the
        SGLang client (the runner's and the facts')."""
        control, state, client = self.parts(fresh)
        service = build_service(
            self.settings, control=control, state=state, sglang=sglang or client, **kwargs
        )
        self.managers.append(service.manager)
        return service.manager

    def start_server(self) -> int:
        """Start the configured command and wait for health 200; returns its pid."""
        control, _, client = self.parts()
        control.start("test:1")
        deadline = time.monotonic() + 60
        while client.health() != 200:
            assert time.monotonic() < deadline, "the simulator did not become healthy in 60 s"
            assert control.status().running, self.log_text()[-2000:]
            time.sleep(0.05)
        pid = control.status().main_pid
        assert pid is not None
        return pid

    def log_text(self) -> str:
        try:
            return self.settings.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def make_settings(tmp: Path, command: list[str], **agent: Any) -> AgentSettings:
    env = {
        "KIMI_SIM_PROFILE": agent.pop("profile", "small-2gpu"),
        "KIMI_SIM_TIME_SCALE": agent.pop("time_scale", FAST),
        "KIMI_SIM_STATE_DIR": str(tmp / "sim"),
        "KIMI_SIM_VERSION": agent.pop("version", "0.5.9"),
        **agent.pop("extra_env", {}),
    }
    port = next(int(command[i + 1]) for i, a in enumerate(command) if a == "--port")
    section = {
        "backend": "process",
        "command": command,
        "server_url": f"http://127.0.0.1:{port}",
        "state_dir": str(tmp / "agent"),
        "log_file": str(tmp / "server.log"),
        "probe": "sim",
        "sim_profile": env["KIMI_SIM_PROFILE"],
        "sim_state_dir": str(tmp / "sim"),
        "headroom_gb": 0,
        "stop_grace_s": 10,
        "gpu_free_timeout_s": 5,
        "stall_after_s": 30,
        "hard_ceiling_s": 120,
        "poll_interval_s": 0.05,
        "env": env,
        **agent,
    }
    return agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "t0ken"})


@pytest.fixture
def harness_factory(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    """Build harnesses; afterwards close every manager and kill every simulator they started."""
    made: list[Harness] = []

    def build(command: list[str], **agent: Any) -> Harness:
        harness = Harness(tmp_path, make_settings(tmp_path, command, **agent))
        made.append(harness)
        return harness

    yield build
    for harness in made:
        for manager in harness.managers:
            manager.close(timeout_s=10)
        for client in harness.clients:
            client.close()
    _kill_simulators(tmp_path)
    for harness in made:
        for control in harness.controls:
            with contextlib.suppress(Exception):
                control.stop(5)  # reaps the child this control started
            # A server this control started but another agent instance stopped was never
            # collected through its Popen, which would warn when garbage-collected.
            if isinstance(control, ProcessControl):
                control.release()


def _kill_simulators(tmp: Path) -> None:
    """Kill every process whose command line runs bot.sim with this test's state dir."""
    marker = str(tmp)
    killed: list[psutil.Process] = []
    for process in psutil.process_iter(["pid", "environ", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            env = process.info.get("environ") or {}
            if marker in env.get("KIMI_SIM_STATE_DIR", ""):
                process.kill()
                killed.append(process)
    # Wait until they are gone (psutil reaps our own children), so no Popen object is collected
    # while its process still runs.
    psutil.wait_procs(killed, timeout=10)


def wait_final(manager: OperationManager, op_id: int, timeout_s: float = 90) -> OperationView:
    """Follow the operation by long-polls until it is final (bounded)."""
    deadline = time.monotonic() + timeout_s
    after = 0
    while True:
        view, events = manager.wait_events(op_id, after, 1.0)
        if events:
            after = events[-1].seq
        if view.finished and not manager.wait_events(op_id, after, 0)[1]:
            return view
        assert time.monotonic() < deadline, f"operation {op_id} not final in {timeout_s} s"


def phases(events: list[ProgressEvent]) -> list[str]:
    """The phases in order, each run of one phase once."""
    out: list[str] = []
    for event in events:
        if not out or out[-1] != event.phase:
            out.append(event.phase)
    return out
