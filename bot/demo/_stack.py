"""The demo's machine: a simulated 449 GB / 8-GPU host, an agent with the process backend, and a
migrated SQLite store, all in one temporary folder, all stopped on exit."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bot.errors import DemoError
from bot.sim import model_dir

SIM_PROFILE = "kimi-k25-8gpu"
TOKEN_ENV = "KIMI_DEMO_AGENT_TOKEN"


@dataclass(frozen=True)
class DemoStack:
    root: Path
    agent_url: str
    token: str
    db_url: str

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.agent_url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=httpx.Timeout(10.0, read=90.0),
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _agent_config(root: Path, sim_port: int, time_scale: float) -> str:
    command = [
        sys.executable, "-m", "bot.sim",
        "--model-path", str(model_dir(SIM_PROFILE)), "--tp-size", "8", "--port", str(sim_port),
        "--trust-remote-code", "--mem-fraction-static", "0.88",
        "--enable-hierarchical-cache", "--hicache-size", "48",
        "--hicache-write-policy", "write_through", "--enable-metrics",
    ]  # fmt: skip
    sim_state = root / "sim-state"
    return "\n".join(
        [
            "[agent]",
            'listen = "127.0.0.1:0"',
            f'token_env = "{TOKEN_ENV}"',
            'backend = "process"',
            f"command = {json.dumps(command)}",
            f'server_url = "http://127.0.0.1:{sim_port}"',
            f'state_dir = "{root / "agent"}"',
            f'log_file = "{root / "sglang.log"}"',
            'probe = "sim"',
            f'sim_profile = "{SIM_PROFILE}"',
            f'sim_state_dir = "{sim_state}"',
            'host_name = "kimi-01"',
            "stop_grace_s = 20",
            "gpu_free_timeout_s = 60",
            "stall_after_s = 30",
            "poll_interval_s = 0.2",
            "",
            "[agent.env]",
            f'KIMI_SIM_PROFILE = "{SIM_PROFILE}"',
            f'KIMI_SIM_TIME_SCALE = "{time_scale}"',
            f'KIMI_SIM_STATE_DIR = "{sim_state}"',
            "",
        ]
    )


@contextmanager
def demo_stack(root: Path, time_scale: float) -> Iterator[DemoStack]:
    """Start the agent (which starts the simulator on the first operation); stop all on exit."""
    from bot.store import upgrade_to_head

    db_url = f"sqlite:///{root / 'kimi-ops.db'}"
    upgrade_to_head(db_url)
    config = root / "kimi-ops.toml"
    config.write_text(_agent_config(root, _free_port(), time_scale))
    token = os.urandom(16).hex()
    env = {**os.environ, TOKEN_ENV: token}
    agent_log = (root / "agent.log").open("ab")
    agent = subprocess.Popen(
        [sys.executable, "-m", "bot", "agent", "--config", str(config), "--log-level", "warning"],
        stdout=agent_log,
        stderr=subprocess.STDOUT,
        env=env,
        # Out of the terminal's process group: Ctrl-C reaches the demo alone, which then stops
        # the agent and the server in order rather than all at once.
        start_new_session=True,
    )
    try:
        url = _wait_for_address(root / "agent" / "agent.addr", agent)
        yield DemoStack(root=root, agent_url=url, token=token, db_url=db_url)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            agent.kill()
        agent_log.close()
        _stop_server(config, env)


def _wait_for_address(addr_file: Path, agent: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            raise DemoError(f"the agent exited with status {agent.returncode}; see agent.log")
        if addr_file.exists() and addr_file.read_text().strip():
            return addr_file.read_text().strip()
        time.sleep(0.1)
    raise DemoError("the agent did not start listening within 30 s; see agent.log")


def _stop_server(config: Path, env: dict[str, str]) -> None:
    """The agent leaves SGLang running when it exits (by design); the demo stops it through the
    same control backend the agent uses."""
    from bot.agent.config import load_agent_settings
    from bot.agent.service import make_control

    settings = load_agent_settings(config, env)
    make_control(settings).stop(settings.stop_grace_s)
