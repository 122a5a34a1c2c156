"""The agent's chaos rig: one simulated host whose ``kimi-ops agent`` runs as a real process over
real HTTP on the simulator.

A rig is one host on the test's tmp dir (built by :mod:`tests.chaos._agent_setup`): the
simulator (``python -m bot.sim``, the small-2gpu profile at a fast time scale) as the server, on
the process backend (the agent's child) or on the systemd backend (a unit run by the stand-in
``systemctl``/``journalctl`` of ``tests/agent/fake_systemd/``: systemd is not PID 1 here), host
facts from the simulated host, and the agent's real SQLite state. The first server is started
before any agent, as by an earlier run of it; each agent is a fresh ``python -m bot agent`` on
the same config and state (:mod:`tests.chaos._agent_process`).

Every scenario ends with :meth:`AgentRig.check`: the agent's state files parse (SQLite's
integrity check, every JSON record), the operation's events are numbered 1..n with no step
twice, revisions are unique (one per start of an operation's stage), and the server's command on
disk is one of the versions the test knows, the one the agent's status says it will run.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.agent.config import AgentSettings, load_agent_settings
from bot.agent.control.systemd import DROP_IN_NAME, parse_exec_start
from bot.agent.service import make_control
from bot.agent.sglang_client import SGLangClient
from tests.agent._ops_fixtures import _kill_simulators
from tests.chaos._agent_process import AgentProcess, launch_agent

__all__ = ["BASE_FLAGS", "PROFILE", "RATIO_2", "AgentProcess", "AgentRig", "replace_flag"]

UNIT = "sglang-chaos.service"
PROFILE = "small-2gpu"
# small-2gpu at --mem-fraction-static 0.7: 150,000 device tokens of 35,136 B (the profile).
BASE_FLAGS = ("--mem-fraction-static", "0.7")
RATIO_2 = (*BASE_FLAGS, "--enable-hierarchical-cache", "--hicache-ratio", "2")
_START_SERVER = (
    "import os, sys\n"
    "from pathlib import Path\n"
    "from bot.agent.config import load_agent_settings\n"
    "from bot.agent.service import make_control\n"
    'make_control(load_agent_settings(Path(sys.argv[1]), os.environ)).start("chaos:0")\n'
)


def replace_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag``'s value replaced: the command line a resize should write, derived
    here rather than taken from the agent."""
    out = list(argv)
    index = out.index(flag)
    out[index + 1] = value
    return out


@dataclass
class AgentRig:
    """One simulated host and its agent's config on the test's tmp dir (module docstring)."""

    tmp: Path
    backend: str
    config: Path
    settings: AgentSettings
    env: dict[str, str]
    initial_argv: list[str]
    agents: list[AgentProcess] = field(default_factory=list)

    # -- the server ---------------------------------------------------------------------------

    def start_server(self) -> None:
        """Start the configured server as an earlier run of the agent would have (a process
        that exits once it is spawned: the server is no child of the test), and wait for health
        200."""
        subprocess.run(
            [sys.executable, "-c", _START_SERVER, str(self.config)],
            env=self.env,
            check=True,
            timeout=60,
        )
        control = make_control(self.settings)
        with SGLangClient(self.settings.server_url, timeout=2.0) as client:
            deadline = time.monotonic() + 60
            while client.health() != 200:
                assert time.monotonic() < deadline, f"no health 200:\n{self.log_text()[-2000:]}"
                assert control.status().running, self.log_text()[-2000:]
                time.sleep(0.05)

    def set_server_env(self, env: Mapping[str, str]) -> None:
        """From the next start on, the server runs with ``env`` added: in the agent's
        ``[agent.env]`` (read when an agent starts) or a drop-in of the operator's own."""
        if self.backend == "process":
            lines = "".join(f"{name} = {json.dumps(value)}\n" for name, value in env.items())
            self.config.write_text(self.config.read_text() + lines)  # [agent.env] is last
            self.settings = load_agent_settings(self.config, self.env)
            return
        folder = self.settings.unit_dir / f"{UNIT}.d"
        folder.mkdir(exist_ok=True)
        lines = "".join(f"Environment={name}={value}\n" for name, value in env.items())
        (folder / "10-chaos-env.conf").write_text("[Service]\n" + lines)

    def server_info(self) -> dict[str, Any] | None:
        with SGLangClient(self.settings.server_url, timeout=2.0) as client:
            return client.server_info()

    def server_pid(self) -> int | None:
        return make_control(self.settings).status().main_pid

    def log_text(self) -> str:
        path = self.settings.log_file if self.backend == "process" else self._journal
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def _journal(self) -> Path:
        return self.tmp / "fake-systemd" / f"{UNIT}.journal"

    def starts(self) -> int:
        """How many times a server was started: the simulator's own ``server_args=`` line,
        once per start, in its output."""
        return self.log_text().count("server_args=")

    def command_on_disk(self) -> list[str]:
        """The command line the next start runs, read from the backend's file (the command
        record or the drop-in; the unit's own ExecStart when there is no drop-in)."""
        if self.backend == "process":
            stored = json.loads((self.settings.state_dir / "command.json").read_text())
            return list(stored["argv"])
        drop_in = self.settings.unit_dir / f"{UNIT}.d" / DROP_IN_NAME
        if not drop_in.exists():
            return list(self.initial_argv)
        return parse_exec_start(drop_in.read_text().splitlines()[-1].partition("=")[2])

    def config_files(self) -> list[Path]:
        """The files the backend writes the server's config and its start records to."""
        if self.backend == "process":
            return [self.settings.state_dir / name for name in ("command.json", "server.json")]
        folder = self.settings.unit_dir / f"{UNIT}.d"
        return sorted(p for p in folder.glob("50-kimi-ops-*") if not p.name.endswith(".tmp"))

    # -- the agent ----------------------------------------------------------------------------

    def start_agent(
        self,
        *,
        crash_at: str | None = None,
        file_size_limit: int | None = None,
        wait_ready: bool = True,
    ) -> AgentProcess:
        """Start ``kimi-ops agent`` on this config (:func:`launch_agent`); closed with the rig."""
        agent = launch_agent(
            self.config,
            self.env,
            self.settings.state_dir,
            crash_at=crash_at,
            file_size_limit=file_size_limit,
            wait_ready=wait_ready,
        )
        self.agents.append(agent)
        return agent

    # -- the checker --------------------------------------------------------------------------

    def check(
        self, agent: AgentProcess, op_id: int | None, known: Sequence[Sequence[str]]
    ) -> list[dict[str, Any]]:
        """The checks every scenario ends with (module docstring); ``known``: the command lines
        the server may have on disk. Returns the operation's events (none without ``op_id``)."""
        self.check_files()
        on_disk = self.command_on_disk()
        assert on_disk in [list(k) for k in known], f"unknown command on disk: {on_disk}"
        assert agent.status()["config"]["command"] == on_disk, "the agent reads another command"
        revisions = agent.http.get("/v1/revisions").json()["revisions"]
        ids = [r["id"] for r in revisions]
        assert len(ids) == len(set(ids)), f"a revision id twice: {ids}"
        per_start = [(r["operation_id"], r["kind"]) for r in revisions if r["operation_id"]]
        assert len(per_start) == len(set(per_start)), f"a start recorded twice: {per_start}"
        if op_id is None:
            return []
        replay = agent.http.get(f"/v1/operations/{op_id}", params={"after": 0}).json()
        events: list[dict[str, Any]] = replay["events"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), events
        steps = [e["data"]["step"] for e in events if "step" in e["data"]]
        assert len(steps) == len(set(steps)), f"a step twice: {steps}"
        return events

    def check_files(self) -> None:
        """The agent's state file passes SQLite's integrity check; every JSON record parses."""
        state = self.settings.state_dir
        with contextlib.closing(sqlite3.connect(state / "agent.sqlite3", timeout=30)) as db:
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            db.execute("SELECT count(*) FROM operations").fetchone()
        for path in [*state.glob("*.json"), *self.config_files()]:
            if path.suffix == ".json" and path.exists():
                json.loads(path.read_text())  # a partial file would not parse
        for path in self.config_files():
            if path.suffix == ".conf" and path.exists():
                text = path.read_text()
                assert text.startswith("[Service]\nExecStart=\nExecStart="), text
                assert text.endswith("\n"), f"{path.name} cut short: {text!r}"

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        with contextlib.suppress(Exception):
            make_control(self.settings).stop(5)
        _kill_simulators(self.tmp)
