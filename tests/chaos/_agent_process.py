"""One ``kimi-ops agent`` process of the agent-side chaos scenarios, started by the test.

:func:`launch_agent` starts ``python -m bot agent`` on a config, optionally armed with the
agent's test hook (``KIMI_AGENT_CRASH_AT``: it SIGKILLs itself inside one named write) or
under a file-size limit (a full disk), and waits for the address it writes to
``state_dir/agent.addr``. Its stderr is read through a pipe by a thread: a pipe is not subject
to a file-size limit, so its log survives a "full disk".
"""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from bot.agent.write_hook import CRASH_AT_ENV
from bot.vocab import FINAL_OPERATION_STATES
from tests.agent._api_helpers import auth

__all__ = ["AgentProcess", "launch_agent"]

_FINAL = {state.value for state in FINAL_OPERATION_STATES}


@dataclass
class AgentProcess:
    """One ``kimi-ops agent`` process; its stderr lines gathered by a thread."""

    process: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)
    url: str = ""
    _http: httpx.Client | None = None

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._gather, daemon=True)
        self._reader.start()

    def _gather(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.lines.append(raw.decode("utf-8", errors="replace"))

    def log(self) -> str:
        return "".join(self.lines)

    def wait_log(self, text: str, timeout_s: float = 30) -> None:
        """Wait until ``text`` is in the agent's log (its stderr reaches us through a thread)."""
        deadline = time.monotonic() + timeout_s
        while text not in self.log():
            if time.monotonic() > deadline:
                pytest.fail(f"not in the agent's log within {timeout_s} s: {text!r}\n{self.log()}")
            time.sleep(0.05)

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(base_url=self.url, headers=auth(), timeout=60)
        return self._http

    def submit(self, **body: Any) -> httpx.Response:
        """POST /v1/operations with ``actor`` "ana" unless given."""
        return self.http.post("/v1/operations", json={"actor": "ana", **body})

    def status(self) -> dict[str, Any]:
        response = self.http.get("/v1/status")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def follow(
        self, op_id: int, until: Callable[[list[dict[str, Any]]], bool] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Long-poll ``op_id`` until it is final (or ``until(events)`` holds), within 180 s; the
        last body and every event, once each."""
        events: list[dict[str, Any]] = []
        after = 0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            body = self.http.get(
                f"/v1/operations/{op_id}", params={"after": after, "wait": 5}
            ).json()
            events += body["events"]
            after = body["last_seq"]
            if body["state"] in _FINAL or (until is not None and until(events)):
                return body, events
        pytest.fail(f"operation {op_id} did not end within 180 s; last events {events[-3:]}")

    def wait_exit(self, timeout_s: float = 120) -> int:
        """The exit code once the process ends (bounded; -9 for SIGKILL)."""
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the agent did not exit within {timeout_s} s:\n{self.log()[-3000:]}")
        self._reader.join(timeout=30)  # the rest of its log, up to the pipe's end
        return code

    def limit_file_size(self, n_bytes: int | None) -> None:
        """Set the running agent's soft RLIMIT_FSIZE (None: no limit), as a disk that fills
        (or is emptied) while it runs; its SIGXFSZ is ignored, so writes fail with EFBIG."""
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        soft = resource.RLIM_INFINITY if n_bytes is None else n_bytes
        psutil.Process(self.process.pid).rlimit(psutil.RLIMIT_FSIZE, (soft, hard))

    def stop(self) -> int:
        """SIGTERM, then the exit code (bounded)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait_exit(30)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        self._reader.join(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()


def launch_agent(
    config: Path,
    env: Mapping[str, str],
    state_dir: Path,
    *,
    crash_at: str | None = None,
    file_size_limit: int | None = None,
    wait_ready: bool = True,
) -> AgentProcess:
    """Start ``kimi-ops agent`` on ``config`` (``crash_at``: its test hook; with
    ``file_size_limit`` its RLIMIT_FSIZE from the start); wait until it serves unless
    ``wait_ready`` is False (an agent that may die first)."""
    child_env = dict(env)
    if crash_at is not None:
        child_env[CRASH_AT_ENV] = crash_at
    addr = state_dir / "agent.addr"
    addr.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "agent", "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env,
        preexec_fn=_file_size_limit(file_size_limit),
    )
    agent = AgentProcess(process)
    if not wait_ready:
        return agent
    deadline = time.monotonic() + 90
    while not (addr.is_file() and addr.read_text(encoding="utf-8").strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            agent.close()
            pytest.fail(f"the agent did not start:\n{agent.log()[-3000:]}")
        time.sleep(0.05)
    agent.url = addr.read_text(encoding="utf-8").strip()
    return agent


def _file_size_limit(n_bytes: int | None) -> Callable[[], None]:
    """What the child runs before exec: SIGXFSZ ignored (a write past the limit then fails with
    EFBIG instead of killing the process), and the limit if one is given."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if n_bytes is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, hard))

    return apply
