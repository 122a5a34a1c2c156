"""Helpers for the agent's facts, API and CLI tests: a config for an agent driving the simulator.

The agent runs the real simulator (``python -m bot.sim``) through the process backend, with
``probe = "sim"``, so host facts are the simulated host's (the field notes' 449 GB, 8-GPU machine
for ``kimi-k25-8gpu``). Every path is under the test's ``tmp_path`` and every port is picked free.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from bot.agent.config import AgentSettings, load_agent_settings
from tests._ports import free_port as free_port
from tests.agent.conftest import PYTHON

TOKEN = "t0ken-for-tests-7f3a9c-0123456789abcdef"  # 32+ characters, as the agent wants
TOKEN_ENV = "KIMI_AGENT_TOKEN"
KIMI = "kimi-k25-8gpu"
SMALL = "small-2gpu"


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)  # strings, numbers, booleans and lists read the same in TOML


def sim_command(port: int, tp: int, *hicache: str) -> list[str]:
    """The simulator's launch argv, SGLang style."""
    return [
        PYTHON,
        "-m",
        "bot.sim",
        "--model-path",
        "/models/kimi-k2.5",
        "--tp",
        str(tp),
        "--port",
        str(port),
        *hicache,
    ]


def write_config(
    tmp_path: Path,
    profile: str = KIMI,
    time_scale: float = 0.002,
    hicache: tuple[str, ...] = ("--enable-hierarchical-cache", "--hicache-ratio", "2"),
    probe: str = "sim",
    **agent: Any,
) -> Path:
    """A kimi-ops TOML for an agent on the simulator; ``agent`` overrides ``[agent]`` keys."""
    port = free_port()
    tp = 8 if profile == KIMI else 2
    sim_state = tmp_path / "sim-host"
    keys: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "token_env": TOKEN_ENV,
        "backend": "process",
        "command": sim_command(port, tp, *hicache),
        "server_url": f"http://127.0.0.1:{port}",
        "state_dir": str(tmp_path / "agent-state"),
        "log_file": str(tmp_path / "server.log"),
        "probe": probe,
        "sim_profile": profile,
        "sim_state_dir": str(sim_state),
        "headroom_gb": 40,
        "stop_grace_s": 5,
        "gpu_free_timeout_s": 20,
        "stall_after_s": 30,
        "hard_ceiling_s": 120,
        "poll_interval_s": 0.05,
        "host_name": "kimi-test",
    }
    keys.update(agent)
    env = {
        "KIMI_SIM_PROFILE": profile,
        "KIMI_SIM_TIME_SCALE": str(time_scale),
        "KIMI_SIM_STATE_DIR": str(sim_state),
    }
    lines = ["[agent]", *(f"{key} = {_toml(value)}" for key, value in keys.items())]
    lines += ["", "[agent.env]", *(f"{key} = {_toml(value)}" for key, value in env.items())]
    path = tmp_path / "kimi-ops.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def agent_settings(tmp_path: Path, **kwargs: Any) -> AgentSettings:
    """Settings read from a config written by :func:`write_config`, token included."""
    return load_agent_settings(write_config(tmp_path, **kwargs), {TOKEN_ENV: TOKEN})


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tree_listing(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes, to show that nothing changed."""
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with contextlib.suppress(FileNotFoundError):
                out[str(path.relative_to(root))] = path.read_bytes()
    return out


@contextlib.contextmanager
def serve_in_thread(app: ASGIApp) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free port in a thread; yield its base URL (real HTTP)."""
    config = uvicorn.Config(app, log_config=None, lifespan="off", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@dataclass
class AgentProcess:
    """``kimi-ops agent`` running as a subprocess; ``url`` from the address file it wrote."""

    process: subprocess.Popen[bytes]
    url: str
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 30) -> int:
        """Send ``sig`` and wait (bounded) for the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout_s)


def agent_env(**extra: str) -> dict[str, str]:
    """This environment (KIMI_* already cleared by the suite) with the token and ``extra``."""
    return {**os.environ, TOKEN_ENV: TOKEN, **extra}


@contextlib.contextmanager
def run_agent(
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    state_dir: Path,
    preexec: Callable[[], None] | None = None,
) -> Iterator[AgentProcess]:
    """Start ``python -m bot agent ARGS`` (``preexec`` run in the child before exec, e.g. to
    lower its limits); yield once it wrote ``state_dir/agent.addr``."""
    stderr_path = tmp_path / f"agent-{time.monotonic_ns()}.err"
    addr = state_dir / "agent.addr"
    addr.unlink(missing_ok=True)
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [PYTHON, "-m", "bot", "agent", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            preexec_fn=preexec,
        )
    agent = AgentProcess(process, "", stderr_path)
    try:
        deadline = time.monotonic() + 60
        while not addr.is_file():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the agent did not start:\n{agent.stderr()}")
            time.sleep(0.05)
        agent.url = addr.read_text(encoding="utf-8").strip()
        yield agent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
