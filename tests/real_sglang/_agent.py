"""``kimi-ops agent`` driving the real SGLang, seen only through its public surfaces.

The agent runs as a subprocess (``python -m bot agent --config FILE``, process backend, ``probe =
"host"``: this machine's RAM and process table; there is no GPU, so no NVML) and is reached over
real HTTP at the address it writes to ``state_dir/agent.addr``. Nothing here imports the agent's
modules, so moving them around inside ``bot.agent`` changes nothing for these tests.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from bot.vocab import OperationState

__all__ = [
    "FINAL",
    "TOKEN",
    "Agent",
    "follow",
    "run_agent",
    "stop_process_tree",
    "stop_servers_of",
    "write_agent_config",
]

TOKEN = "real-sglang-t0ken-5e1f-0123456789abcdef"  # 32+ characters, as the agent wants
TOKEN_ENV = "KIMI_AGENT_TOKEN"
FINAL = frozenset({OperationState.READY, OperationState.FAILED, OperationState.ROLLED_BACK})
# A real start takes 20 s on 2 idle cores and several minutes when the machine is busy; the
# agent's own stall detector and hard ceiling are what decide, these only bound the test.
OPERATION_TIMEOUT_S = 900


def write_agent_config(
    root: Path, command: Sequence[str], server_url: str, env: Mapping[str, str]
) -> Path:
    """A kimi-ops TOML (``deploy/kimi-ops.example.toml``'s keys) for an agent on this host.

    ``headroom_gb`` is 1: the 40 GB default is for a GPU host, this one has about 20 GB of RAM.
    """
    agent: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "token_env": TOKEN_ENV,
        "backend": "process",
        "command": list(command),
        "server_url": server_url,
        "state_dir": str(root / "agent-state"),
        "log_file": str(root / "server.log"),
        "probe": "host",
        "headroom_gb": 1,
        "stop_grace_s": 30,
        "gpu_free_timeout_s": 60,
        "stall_after_s": 300,
        "hard_ceiling_s": OPERATION_TIMEOUT_S - 60,
        "poll_interval_s": 0.2,
        "host_name": "real-sglang-cpu",
    }
    # JSON strings, numbers and lists are TOML too.
    lines = ["[agent]", *(f"{key} = {json.dumps(value)}" for key, value in agent.items())]
    lines += ["", "[agent.env]", *(f"{key} = {json.dumps(value)}" for key, value in env.items())]
    path = root / "kimi-ops.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class Agent:
    """A running agent: its HTTP client (token set) and where its server logs."""

    process: subprocess.Popen[bytes]
    http: httpx.Client
    log_file: Path
    stderr_file: Path

    def stderr(self) -> str:
        return self.stderr_file.read_text(encoding="utf-8", errors="replace")

    def operate(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST an operation (202 expected) and follow it to its final state."""
        response = self.http.post("/v1/operations", json=body)
        assert response.status_code == 202, response.text
        return follow(self.http, int(response.json()["id"]))


@contextlib.contextmanager
def run_agent(config: Path, root: Path, environ: Mapping[str, str]) -> Iterator[Agent]:
    """Start ``kimi-ops agent --config FILE``; yield once it wrote its address; SIGTERM it at
    the end (the agent leaves the server running: stop that with :func:`stop_process_tree`)."""
    state_dir = root / "agent-state"
    addr = state_dir / "agent.addr"
    addr.unlink(missing_ok=True)
    stderr_file = root / "agent.err"
    env = {**environ, TOKEN_ENV: TOKEN}
    with stderr_file.open("ab") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "agent", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while not addr.is_file() or not addr.read_text(encoding="utf-8").strip():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    "the agent did not start:\n" + stderr_file.read_text(errors="replace")
                )
            time.sleep(0.05)
        url = addr.read_text(encoding="utf-8").strip()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            yield Agent(process, http, root / "server.log", stderr_file)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def follow(
    http: httpx.Client,
    op_id: int,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Long-poll operation ``op_id`` to its final state; its last body with every event.
    ``on_event`` sees each event as soon as it arrives."""
    events: list[dict[str, Any]] = []
    after = 0
    deadline = time.monotonic() + OPERATION_TIMEOUT_S
    while time.monotonic() < deadline:
        body: dict[str, Any] = http.get(
            f"/v1/operations/{op_id}", params={"after": after, "wait": 20}
        ).json()
        for event in body["events"]:
            events.append(event)
            if on_event is not None:
                on_event(event)
        after = body["last_seq"]
        if body["state"] in FINAL:
            return {**body, "events": events}
    raise AssertionError(f"operation {op_id} did not end within {OPERATION_TIMEOUT_S} s: {events}")


def stop_process_tree(pid: int | None, grace_s: float = 30) -> None:
    """SIGTERM ``pid`` and its children, SIGKILL what is left after ``grace_s``."""
    if pid is None:
        return
    try:
        parent = psutil.Process(pid)
        tree = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for member in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(alive, timeout=10)


def stop_servers_of(model: Path) -> None:
    """Stop every process tree whose command line names ``model`` (a directory only these tests
    use): the server the agent left running, whatever the agent still knows about it."""
    for process in psutil.process_iter(["pid", "cmdline"]):
        if str(model) in (process.info["cmdline"] or []):
            stop_process_tree(process.info["pid"])
