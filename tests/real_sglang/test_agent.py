"""The agent (process backend) runs a real SGLang 0.5.23 on CPU: start, resizes, a failed start.

One agent and its server serve the module; each test starts from whatever config the server runs
and states its expectations from SGLang's rules and the real server's own answers (its
``/server_info`` and its log), never from what the agent computed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.vocab import EventPhase, FailureKind, OperationKind, OperationState, ServerState
from tests.real_sglang._agent import (
    Agent,
    follow,
    run_agent,
    stop_servers_of,
    write_agent_config,
)
from tests.real_sglang._report import assert_ready_report, startup_report
from tests.real_sglang._side import (
    DEVICE_TOKENS,
    SideVenv,
    free_port,
    kv_bytes_per_token,
    server_argv,
)
from tests.real_sglang.conftest import clean_environ, server_environ

pytestmark = pytest.mark.real_sglang

GB = 1e9
PAGE = 1  # --page-size: SGLang's default, not given on the command line
# Allocating kv hierarchical KV host pool: 65537 tokens, 0.02 GB host memory.
HOST_POOL_LINE = re.compile(r"Allocating kv hierarchical KV host pool: (\d+) tokens, ([\d.]+) GB")


def host_tokens_for_size(size_gb: int, bytes_per_token: int) -> int:
    """SGLang's host pool for ``--hicache-size N``: ``int(N * 1e9 // bytes)``, then one page."""
    return int(size_gb * GB // bytes_per_token) // PAGE * PAGE + PAGE


def host_tokens_for_ratio(ratio: float, device_tokens: int) -> int:
    """SGLang's host pool for ``--hicache-ratio R``: ``int(device * R)``, then one page."""
    return int(device_tokens * ratio) // PAGE * PAGE + PAGE


def unreadable_to_the_server() -> list[str]:
    """A launcher prefix under which a directory of mode 000 is unreadable to the server even
    when the tests run as root: root reads anything through CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH, so the server runs without those two (it needs neither otherwise)."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@dataclass
class Stack:
    """The agent, its real server's URL and log, and the model directory the server reads."""

    agent: Agent
    server_url: str
    model: Path
    first_start: dict[str, Any]

    def log_size(self) -> int:
        return self.agent.log_file.stat().st_size if self.agent.log_file.exists() else 0

    def log_since(self, offset: int, until: int | None = None) -> str:
        with self.agent.log_file.open("rb") as log:
            log.seek(offset)
            data = log.read() if until is None else log.read(until - offset)
        return data.decode("utf-8", errors="replace")

    def server_info(self) -> dict[str, Any]:
        """SGLang's own ``/server_info``, asked directly, not through the agent."""
        info: dict[str, Any] = httpx.get(f"{self.server_url}/server_info", timeout=30).json()
        return info

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = self.agent.http.get("/v1/status").json()
        return body


@pytest.fixture(scope="module")
def stack(side: SideVenv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An agent whose server command is the real SGLang at ``--hicache-size 1``, brought up by
    a restart operation (the server was not running); everything stopped afterwards."""
    root = tmp_path_factory.mktemp("agent")
    model = root / "tiny-llama"  # the tests' own copy: one of them makes it unreadable
    shutil.copytree(side.model, model)
    port = free_port()
    command = [
        *unreadable_to_the_server(),
        *server_argv(
            side.python, model, port, "--enable-hierarchical-cache", "--hicache-size", "1"
        ),
    ]
    url = f"http://127.0.0.1:{port}"
    config = write_agent_config(root, command, url, server_environ({}))
    with run_agent(config, root, clean_environ()) as agent:
        try:
            first = agent.operate({"kind": OperationKind.RESTART, "actor": "ana"})
            yield Stack(agent, url, model, first)
        finally:
            model.chmod(0o755)
            stop_servers_of(model)


def _assert_ready(operation: dict[str, Any]) -> None:
    assert operation["state"] == OperationState.READY, [
        (event["phase"], event["message"]) for event in operation["events"][-5:]
    ]


def test_the_agent_starts_the_real_server_and_reports_its_pools(
    stack: Stack, tmp_path: Path
) -> None:
    """Started by the agent, the real server reaches ready, and /v1/status reports the device
    pool of --max-total-tokens, --hicache-size 1 and the 1.00 GB per rank SGLang allocated."""
    _assert_ready(stack.first_start)
    status = stack.status()
    assert status["server"]["state"] == ServerState.RUNNING
    assert status["server"]["health_code"] == 200
    assert status["server"]["version"] == "0.5.23"
    assert status["config"]["enable_hierarchical_cache"] is True
    assert status["config"]["hicache_size"] == 1
    tokens = host_tokens_for_size(1, kv_bytes_per_token(stack.model))
    assert status["capacity"]["device_tokens"] == DEVICE_TOKENS
    assert status["capacity"]["host_tokens_per_rank"] == tokens
    assert status["capacity"]["host_gb_per_rank"] == 1.0
    assert status["capacity"]["ranks"] == 1
    log = stack.log_since(0)
    assert HOST_POOL_LINE.findall(log) == [(str(tokens), "1.00")]
    code, report = startup_report(log, tmp_path / "start.log")
    assert_ready_report(code, report, log, host_tokens=tokens, host_gb=1.0)


def test_resize_size_2_is_confirmed_by_sglangs_server_info(stack: Stack, tmp_path: Path) -> None:
    """`resize size 2` goes to ready and SGLang's own /server_info then reports hicache_size 2;
    the restart's log and its startup report show the 2.00 GB pool."""
    offset = stack.log_size()
    plan = stack.agent.http.post("/v1/plans", json={"size_gb": 2}).json()
    assert plan["plan"]["verdict"] == "fits", plan
    operation = stack.agent.operate(
        {
            "kind": OperationKind.RESIZE,
            "size_gb": 2,
            "actor": "ana",
            "fingerprint": plan["fingerprint"],
        }
    )
    _assert_ready(operation)
    info = stack.server_info()
    assert info["enable_hierarchical_cache"] is True
    assert info["hicache_size"] == 2
    tokens = host_tokens_for_size(2, kv_bytes_per_token(stack.model))
    log = stack.log_since(offset)
    assert HOST_POOL_LINE.findall(log) == [(str(tokens), "2.00")]
    code, report = startup_report(log, tmp_path / "start.log")
    assert_ready_report(code, report, log, host_tokens=tokens, host_gb=2.0)


def test_resize_ratio_4_is_planned_to_the_byte_and_allocated_as_planned(
    stack: Stack, tmp_path: Path
) -> None:
    """`resize ratio 4` is planned by SGLang's rule for this model (16,384 x 4 + one page =
    65,537 tokens x 256 bytes from config.json), and after the restart the real server's
    `Allocating ... host pool` line reports exactly those tokens and GB."""
    bytes_per_token = kv_bytes_per_token(stack.model)
    assert bytes_per_token == 256  # 16 head_dim x 2 KV heads x 2 layers x 2 bytes x (K, V)
    tokens = host_tokens_for_ratio(4, DEVICE_TOKENS)
    assert tokens == 65_537
    proposal = stack.agent.http.post("/v1/plans", json={"ratio": 4}).json()
    plan = proposal["plan"]
    assert plan["verdict"] == "fits", plan

    offset = stack.log_size()
    operation = stack.agent.operate(
        {
            "kind": OperationKind.RESIZE,
            "ratio": 4,
            "actor": "ana",
            "fingerprint": proposal["fingerprint"],
        }
    )
    _assert_ready(operation)
    log = stack.log_since(offset)
    gb = f"{tokens * bytes_per_token / GB:.2f}"
    assert HOST_POOL_LINE.findall(log) == [(str(tokens), gb)]
    info = stack.server_info()
    assert info["hicache_ratio"] == 4.0
    assert info["hicache_size"] == 0
    # The plan is checked after the operation so that a wrong plan still shows what SGLang
    # then allocated.
    assert plan["per_rank_tokens"] == tokens, plan
    assert plan["per_rank_bytes"] == tokens * bytes_per_token, (
        f"planned {plan['per_rank_bytes']} bytes per rank, SGLang's rule gives {tokens} tokens x "
        f"{bytes_per_token} bytes (config.json) = {tokens * bytes_per_token}"
    )
    code, report = startup_report(log, tmp_path / "start.log")
    assert_ready_report(code, report, log, host_tokens=tokens, host_gb=float(gb))


def test_a_start_that_really_fails_is_classified_and_rolled_back(
    stack: Stack, tmp_path: Path
) -> None:
    """With the model directory unreadable, a resize's start fails in SGLang itself; the agent
    classifies it from SGLang's own lines and rolls back to the config that ran before, which
    comes up again once the directory is readable."""
    before = stack.status()
    assert before["server"]["state"] == ServerState.RUNNING
    command_before = before["config"]["command"]
    size = 3 if before["config"]["hicache_size"] != 3 else 2
    offset = stack.log_size()
    failed_until: list[int] = []

    def restore_when_rolling_back(event: dict[str, Any]) -> None:
        # The rollback starts a new SGLang process, which spends seconds importing before it
        # reads the model: the directory is readable again long before that.
        if event["phase"] == EventPhase.ROLLING_BACK and not failed_until:
            failed_until.append(stack.log_size())
            stack.model.chmod(0o755)

    stack.model.chmod(0o000)
    try:
        response = stack.agent.http.post(
            "/v1/operations",
            json={"kind": OperationKind.RESIZE, "size_gb": size, "actor": "ana"},
        )
        assert response.status_code == 202, response.text
        operation = follow(
            stack.agent.http, int(response.json()["id"]), on_event=restore_when_rolling_back
        )
    finally:
        stack.model.chmod(0o755)

    assert operation["state"] == OperationState.ROLLED_BACK, operation["events"][-5:]
    rolling_back = next(e for e in operation["events"] if e["phase"] == EventPhase.ROLLING_BACK)
    cause = rolling_back["data"]["cause"]
    assert cause["kind"] == FailureKind.CRASH, cause
    failed_log = stack.log_since(offset, failed_until[0])
    assert cause["lines"], cause
    for line in cause["lines"]:  # SGLang's own lines, quoted as logged
        assert line in failed_log, line
    assert any(str(stack.model) in line for line in cause["lines"]), cause["lines"]

    after = stack.status()
    assert after["server"]["state"] == ServerState.RUNNING
    assert after["config"]["command"] == command_before
    info = stack.server_info()
    assert info["hicache_size"] == (before["config"]["hicache_size"] or 0)  # None: ratio mode
    code, report = startup_report(failed_log, tmp_path / "failed.log")
    assert code == 1, report
    assert report["ready"] is False
    assert report["failure"]["kind"] == FailureKind.CRASH
