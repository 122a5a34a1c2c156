"""A real agent for the bot core's tests: ``python -m bot agent`` as a subprocess, driving the
simulator (``python -m bot.sim``) through the process backend with ``probe = "sim"``.

The bot side never imports ``bot.agent``; neither do these fixtures: they write the agent's TOML,
start it, read the address it writes to ``state_dir/agent.addr``, and on exit kill the agent and
the simulator's process group (its pid is in ``state_dir/server.json``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.settings import Secret
from bot.sim import model_dir
from bot.vocab import FINAL_OPERATION_STATES, OperationState
from tests._ports import free_port as free_port

PYTHON = sys.executable
TOKEN = "chat-t0ken-4e1d-0123456789abcdef0123"  # 32+ characters, as the agent wants
TOKEN_ENV = "KIMI_AGENT_TOKEN"
KIMI = "kimi-k25-8gpu"
SMALL = "small-2gpu"


@dataclass(frozen=True)
class SimHost:
    """What the simulated host runs: profile, SGLang version, HiCache flags, agent headroom.

    The first start uses ``hicache`` (a size: a ratio cannot be planned before the device pool
    is known); ``serving_ratio`` is then applied so the host serves a ratio, as in the notes.
    """

    profile: str = KIMI
    version: str = "0.5.9"
    hicache: tuple[str, ...] = ("--enable-hierarchical-cache", "--hicache-size", "48")
    serving_ratio: float | None = 2.0
    headroom_gb: float = 40
    time_scale: float = 0.002
    host_name: str = "kimi-01"
    sim_fail: str = ""
    listen_port: int = 0  # a fixed port lets a restarted agent be found at the same URL


def write_agent_config(root: Path, host: SimHost) -> Path:
    """The agent's TOML for ``host``; every path under ``root``, every port free."""
    port = free_port()
    ranks = "8" if host.profile == KIMI else "2"
    sim_state = root / "sim-host"
    command = [
        *(PYTHON, "-m", "bot.sim", "--model-path", str(model_dir(host.profile))),
        *("--tp", ranks, "--port", str(port), *host.hicache),
    ]
    keys: dict[str, Any] = {
        "listen": f"127.0.0.1:{host.listen_port}",
        "token_env": TOKEN_ENV,
        "backend": "process",
        "command": command,
        "server_url": f"http://127.0.0.1:{port}",
        "state_dir": str(root / "agent-state"),
        "log_file": str(root / "server.log"),
        "probe": "sim",
        "sim_profile": host.profile,
        "sim_state_dir": str(sim_state),
        "headroom_gb": host.headroom_gb,
        "stop_grace_s": 5,
        "gpu_free_timeout_s": 20,
        "stall_after_s": 30,
        "hard_ceiling_s": 120,
        "poll_interval_s": 0.05,
        "host_name": host.host_name,
    }
    env = {
        "KIMI_SIM_PROFILE": host.profile,
        "KIMI_SIM_TIME_SCALE": str(host.time_scale),
        "KIMI_SIM_STATE_DIR": str(sim_state),
        "KIMI_SIM_VERSION": host.version,
    }
    if host.sim_fail:
        env["KIMI_SIM_FAIL"] = host.sim_fail
    lines = ["[agent]", *(f"{key} = {json.dumps(value)}" for key, value in keys.items())]
    lines += ["", "[agent.env]", *(f"{key} = {json.dumps(value)}" for key, value in env.items())]
    root.mkdir(parents=True, exist_ok=True)
    path = root / "agent.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class RunningAgent:
    """An agent subprocess on the simulator; ``url`` is where it listens."""

    root: Path
    config: Path
    url: str = ""
    process: subprocess.Popen[bytes] | None = None
    runs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def state_dir(self) -> Path:
        return self.root / "agent-state"

    @property
    def token(self) -> Secret:
        return Secret(TOKEN)

    def env(self) -> dict[str, str]:
        return {**os.environ, TOKEN_ENV: TOKEN}

    def start(self) -> None:
        """Start (or start again) the agent and wait for its address file."""
        addr = self.state_dir / "agent.addr"
        addr.unlink(missing_ok=True)
        # Both streams kept in files: a failed start shows stderr, and the security tests read
        # every byte the agent wrote.
        with (
            (self.root / "agent.out").open("ab") as stdout,
            (self.root / "agent.err").open("ab") as stderr,
        ):
            self.process = subprocess.Popen(
                [PYTHON, "-m", "bot", "agent", "--config", str(self.config)],
                stdout=stdout,
                stderr=stderr,
                env=self.env(),
            )
        self.runs.append(self.process)
        deadline = time.monotonic() + 60
        while not (addr.is_file() and addr.read_text(encoding="utf-8").strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                err = (self.root / "agent.err").read_text(errors="replace")
                raise AssertionError(f"the agent did not start:\n{err}")
            time.sleep(0.05)
        self.url = addr.read_text(encoding="utf-8").strip()

    def kill(self) -> None:
        """SIGKILL the agent (the server it started keeps running)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def http(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        )

    def run_to_end(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST an operation and long-poll it to its final state (bounded); its last page."""
        with self.http() as http:
            response = http.post("/v1/operations", json=body)
            assert response.status_code == 202, response.text
            op_id = response.json()["id"]
            final = {state.value for state in FINAL_OPERATION_STATES}
            after = 0
            for _ in range(200):
                params = {"after": after, "wait": 10}
                page = http.get(f"/v1/operations/{op_id}", params=params).json()
                after = page["last_seq"]
                if page["state"] in final:
                    whole = http.get(f"/v1/operations/{op_id}").json()
                    return dict(whole)
        raise AssertionError(f"operation {op_id} did not end")

    def close(self) -> None:
        for process in self.runs:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
        _kill_server(self.state_dir / "server.json")


def _kill_server(run_file: Path) -> None:
    """The agent leaves the server running by design: kill the simulator's process group."""
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        pid = int(json.loads(run_file.read_text(encoding="utf-8"))["pid"])
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def agent_on_sim(root: Path, host: SimHost, serving: bool = True) -> Iterator[RunningAgent]:
    """An agent on ``host``; with ``serving`` the server is brought up first over the API (a
    restart to ready, then ``serving_ratio``). Everything is stopped on exit."""
    agent = RunningAgent(root=root, config=write_agent_config(root, host))
    try:
        agent.start()
        if serving:
            page = agent.run_to_end({"kind": "restart", "actor": "setup"})
            assert page["state"] == OperationState.READY, page["events"][-3:]
            if host.serving_ratio is not None:
                body = {"kind": "resize", "ratio": host.serving_ratio, "actor": "setup"}
                page = agent.run_to_end(body)
                assert page["state"] == OperationState.READY, page["events"][-3:]
        yield agent
    finally:
        agent.close()


@pytest.fixture
def kimi_agent(tmp_path: Path) -> Iterator[RunningAgent]:
    """The field notes' host (449 GB, TP 8, SGLang 0.5.9) serving ratio 2, and its agent."""
    with agent_on_sim(tmp_path / "kimi-01", SimHost()) as agent:
        yield agent
