"""One rig per server-control backend, so each engine scenario runs on both.

``backend_rig`` is parametrised over ``process`` (the agent runs the real simulator as its child)
and ``systemd`` (the simulator is a unit's ExecStart). systemd is not PID 1 here:
``tests/agent/fake_systemd/`` provides stand-in ``systemctl`` and ``journalctl`` executables that
run the unit's ExecStart in the background and keep its output as the journal; the agent's
systemd backend drives them exactly as it would drive systemd. Host facts come from the
simulator (SimProbe); the agent's state is real SQLite.

A scenario builds its rig with the simulator's flags and environment, starts the first server,
and asks the rig what either backend can tell: the command line as written, how many times the
server was started (the simulator's own ``server_args=`` lines, or the stand-in systemctl's
record), the server's log.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from bot.agent.config import AgentSettings, agent_settings_from_config
from bot.agent.control.protocol import ServerControl
from bot.agent.control.systemd import DROP_IN_NAME, parse_exec_start
from bot.agent.engine.manager import OperationManager
from bot.agent.service import build_service, make_control
from bot.agent.sglang_client import SGLangClient
from bot.agent.state.agent_state import AgentState
from tests.agent._ops_fixtures import (
    Harness,
    _kill_simulators,
    free_port,
    harness_factory,
    sim_command,
)
from tests.agent.conftest import fake_systemd_executables, wait_until

__all__ = [
    "SMALL",
    "BackendRig",
    "SystemdRig",
    "backend_rig",
    "harness_factory",
    "systemd_rig",
]

UNIT = "sglang-ops.service"
REPO = Path(__file__).resolve().parents[3]
# small-2gpu at --mem-fraction-static 0.7 with HiCache on: 150,000 device tokens (the profile).
SMALL = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache")
# Real time at this scale: a small-profile start takes well under a second.
FAST = "0.01"


class BackendRig(Protocol):
    """What a scenario needs of either backend (see the module docstring)."""

    backend: str
    settings: AgentSettings

    def manager(self, fresh: bool = False, sglang: Any = None, **parts: Any) -> OperationManager:
        """A manager composed by the agent's own root; ``fresh`` gives it a new control, as a
        restarted agent has; ``sglang`` and ``parts`` replace what the root would make."""
        ...

    def start_server(self) -> int:
        """Start the configured command, wait for health 200; the server's pid."""
        ...

    def control(self) -> ServerControl:
        """A control on the server (the process backend's is the one that reaps its child)."""
        ...

    def client(self) -> SGLangClient: ...

    def starts(self) -> int:
        """How many times the server was started, counted outside the agent."""
        ...

    def log_text(self) -> str:
        """The server's output: the log file, or the unit's journal."""
        ...

    def server_env(self) -> dict[str, str]:
        """The environment the server runs with (a stray process joins the same simulated host)."""
        ...

    def set_server_env(self, env: Mapping[str, str]) -> None:
        """From the next start on, the server runs with ``env`` added."""
        ...


@dataclass
class ProcessRig:
    """The process backend: the agent's own child, its output in a log file."""

    factory: Callable[..., Harness]
    command: list[str]
    options: dict[str, Any]
    harness: Harness
    backend: str = "process"

    @property
    def settings(self) -> AgentSettings:
        return self.harness.settings

    def manager(self, fresh: bool = False, sglang: Any = None, **parts: Any) -> OperationManager:
        return self.harness.manager(fresh, sglang, **parts)

    def start_server(self) -> int:
        return self.harness.start_server()

    def control(self) -> ServerControl:
        if not self.harness.controls:
            self.harness.controls.append(make_control(self.settings))
        return self.harness.controls[-1]

    def client(self) -> SGLangClient:
        client = SGLangClient(self.settings.server_url, timeout=2.0)
        self.harness.clients.append(client)
        return client

    def starts(self) -> int:
        return self.log_text().count("server_args=")

    def log_text(self) -> str:
        return self.harness.log_text()

    def server_env(self) -> dict[str, str]:
        return {**os.environ, **self.settings.env}

    def set_server_env(self, env: Mapping[str, str]) -> None:
        # The agent's settings carry the server's environment: a new harness on the same
        # directory (same state, same log) is an agent reconfigured with it.
        extra = {**self.options.get("extra_env", {}), **env}
        self.options = {**self.options, "extra_env": extra}
        self.harness = self.factory(self.command, **self.options)


@dataclass
class SystemdRig:
    """One unit over the stand-in systemctl/journalctl and one agent's settings on a tmp dir;
    each ``manager()`` gets its own control, as a restarted agent would."""

    tmp: Path
    settings: AgentSettings
    unit_env: dict[str, str]
    managers: list[OperationManager] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)
    backend: str = "systemd"

    @property
    def fake_state(self) -> Path:
        return self.tmp / "fake"

    def control(self) -> ServerControl:
        return make_control(self.settings)

    def client(self) -> SGLangClient:
        client = SGLangClient(self.settings.server_url, timeout=2.0)
        self.closers.append(client.close)
        return client

    def manager(self, fresh: bool = False, sglang: Any = None, **parts: Any) -> OperationManager:
        """A manager with its own control, client and state connection on this rig (a systemd
        control holds no child, so every one is ``fresh``)."""
        state = AgentState(self.settings.state_dir)
        self.closers.append(state.close)
        service = build_service(self.settings, sglang=sglang or self.client(), state=state, **parts)
        self.managers.append(service.manager)
        return service.manager

    def start_server(self) -> int:
        """Start the unit as written and wait for health 200; returns its MainPID."""
        control, client = self.control(), self.client()
        control.start("test:1")
        wait_until(lambda: client.health() == 200 or not control.status().running, 60)
        assert client.health() == 200, self.log_text()[-2000:]
        pid = control.status().main_pid
        assert pid is not None
        return pid

    def add_drop_in(self, name: str, text: str) -> None:
        """Write a drop-in of the operator's own beside the agent's (read at the next start)."""
        directory = self.settings.unit_dir / f"{UNIT}.d"
        directory.mkdir(exist_ok=True)
        (directory / name).write_text(text)

    def set_server_env(self, env: Mapping[str, str]) -> None:
        lines = [f"Environment={name}={value}" for name, value in env.items()]
        self.add_drop_in("10-test-env.conf", "\n".join(["[Service]", *lines, ""]))

    def server_env(self) -> dict[str, str]:
        return {**os.environ, **self.unit_env}

    def starts(self) -> int:
        """How many times the stand-in systemctl started the unit (its own record)."""
        return len(json.loads((self.fake_state / f"{UNIT}.json").read_text())["starts"])

    def calls(self) -> list[str]:
        """The stand-in systemctl's invocations, one ``verb args`` line each."""
        return (self.fake_state / "calls.log").read_text().splitlines()

    def log_text(self) -> str:
        try:
            return (self.fake_state / f"{UNIT}.journal").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def drop_in_argv(self, name: str = DROP_IN_NAME) -> list[str]:
        """The ExecStart the agent's drop-in (or the kept previous one) sets."""
        path = self.settings.unit_dir / f"{UNIT}.d" / name
        value = path.read_text().splitlines()[-1].partition("=")[2]
        return parse_exec_start(value)


def _build_systemd(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, ...],
    env: Mapping[str, str],
    profile: str,
    **agent: Any,
) -> SystemdRig:
    units, fake_state, sim_state = tmp / "units", tmp / "fake", tmp / "sim"
    for directory in (units, fake_state, sim_state):
        directory.mkdir()
    port = free_port()
    argv = sim_command(port, *flags)
    unit_env = {
        "KIMI_SIM_PROFILE": profile,
        "KIMI_SIM_TIME_SCALE": FAST,
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
    systemctl, journalctl = fake_systemd_executables(tmp / "bin")
    section = {
        "backend": "systemd",
        "unit": UNIT,
        "unit_dir": str(units),
        "systemctl": str(systemctl),
        "journalctl": str(journalctl),
        "server_url": f"http://127.0.0.1:{port}",
        "state_dir": str(tmp / "agent"),
        "probe": "sim",
        "sim_profile": profile,
        "sim_state_dir": str(sim_state),
        "headroom_gb": 0,
        "stop_grace_s": 10,
        "gpu_free_timeout_s": 5,
        "stall_after_s": 30,
        "hard_ceiling_s": 120,
        "poll_interval_s": 0.05,
        **agent,
    }
    settings = agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "t"})
    return SystemdRig(tmp, settings, unit_env)


@pytest.fixture
def systemd_rig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., SystemdRig]]:
    """Build the test's systemd rig (``flags``: the simulator's; ``env``: the unit's extra
    Environment=; ``profile``; keywords: [agent] overrides). Afterwards close every manager,
    stop the unit and kill its simulators."""
    made: list[SystemdRig] = []

    def build(
        *flags: str,
        env: Mapping[str, str] | None = None,
        profile: str = "small-2gpu",
        **agent: Any,
    ) -> SystemdRig:
        assert not made, "one rig per test: the stand-in systemd's state is per test"
        used = flags or (*SMALL, "--hicache-ratio", "2")
        rig = _build_systemd(tmp_path, monkeypatch, used, env or {}, profile, **agent)
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


@pytest.fixture(params=["process", "systemd"])
def backend_rig(
    request: pytest.FixtureRequest,
    harness_factory: Callable[..., Harness],
    systemd_rig: Callable[..., SystemdRig],
) -> Callable[..., BackendRig]:
    """Build the test's rig on one backend: ``flags`` for the simulator, ``env`` its extra
    environment (``KIMI_SIM_*``), ``profile``, and [agent] overrides as keywords."""

    def build(
        *flags: str,
        env: Mapping[str, str] | None = None,
        profile: str = "small-2gpu",
        **agent: Any,
    ) -> BackendRig:
        used = flags or (*SMALL, "--hicache-ratio", "2")
        if request.param == "systemd":
            return systemd_rig(*used, env=env, profile=profile, **agent)
        command = sim_command(free_port(), *used)
        options = {"profile": profile, "extra_env": dict(env or {}), **agent}
        return ProcessRig(harness_factory, command, options, harness_factory(command, **options))

    return build
