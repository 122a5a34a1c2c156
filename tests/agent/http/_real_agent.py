"""A real agent (``kimi-ops agent`` in a subprocess, uvicorn on a real port) for the tests of the
API server's limits, with an operation already ended to long-poll on."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bot.agent.config import load_agent_settings
from bot.agent.service import make_control
from tests.agent._api_helpers import (
    SMALL,
    TOKEN,
    TOKEN_ENV,
    AgentProcess,
    agent_env,
    auth,
    run_agent,
    write_config,
)

FINAL = ("ready", "failed", "rolled_back")
#: A resize the small simulated host starts (with no headroom: a host pool must be larger than
#: its 7 GB device pool per rank, and 2 x 10 GB fits its 60 GB less SGLang's reserve).
RESIZE = {"kind": "resize", "actor": "test", "size_gb": 10}


@dataclass
class Agent:
    """The agent, its state directory and its log path."""

    process: AgentProcess
    state_dir: Path

    @property
    def url(self) -> str:
        return self.process.url

    def rss_kib(self) -> int:
        """The agent process's resident memory, from /proc."""
        for line in Path(f"/proc/{self.process.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS line")


@contextlib.contextmanager
def real_agent(
    tmp_path: Path, tokens: str = TOKEN, preexec: Any = None, **agent_keys: Any
) -> Iterator[Agent]:
    """Start the agent on the small simulated host with ``tokens`` in its token variable."""
    config = write_config(tmp_path, profile=SMALL, **{"headroom_gb": 0, **agent_keys})
    env = {**agent_env(), TOKEN_ENV: tokens}
    settings = load_agent_settings(config, {TOKEN_ENV: TOKEN})
    try:
        with run_agent(
            tmp_path, ["--config", str(config)], env, settings.state_dir, preexec
        ) as process:
            yield Agent(process, settings.state_dir)
            process.stop()
    finally:
        make_control(settings).stop(grace_s=5)  # the server outlives its agent: stop it too


def run_operation(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Submit ``body`` and long-poll it to its end; its id and the last page."""
    with httpx.Client(base_url=url, headers=auth(), timeout=60) as http:
        submitted = http.post("/v1/operations", json=body)
        assert submitted.status_code == 202, submitted.text
        op_id = int(submitted.json()["id"])
        after = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            page = http.get(f"/v1/operations/{op_id}", params={"after": after, "wait": 5}).json()
            after = page["last_seq"]
            if page["state"] in FINAL:
                return op_id, page
    raise AssertionError(f"operation {op_id} did not end in 120 s")
