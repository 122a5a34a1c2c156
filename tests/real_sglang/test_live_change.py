"""Live HiCache changes on the real SGLang 0.5.23 on CPU, through the agent (a subprocess) and
checked by SGLang's own ``GET /hicache/storage-backend``, asked directly with the admin key.

The file storage backend writes into a temporary directory (``file_storage_path`` in its extra
config). One agent and one real server serve the module; the tests run in file order.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.agent.sglang_client import SGLangClient
from bot.settings import Secret
from bot.vocab import OperationKind, OperationState
from tests.real_sglang._agent import Agent, follow, run_agent, stop_servers_of, write_agent_config
from tests.real_sglang._side import SideVenv, free_port, server_argv
from tests.real_sglang.conftest import clean_environ, server_environ

pytestmark = pytest.mark.real_sglang

KEY = "real-admin-key-3c9d"
KEY_ENV = "KIMI_TEST_SGLANG_ADMIN_KEY"
# The tiny model's context is 2,048 tokens; 200 output tokens keep a request running for a second
# or more on this machine's two cores, and two loops of them keep the server busy throughout.
LONG_GENERATE = {"text": "hello", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}


@dataclass
class LiveStack:
    agent: Agent
    server_url: str
    storage: Path

    def sglang(self, key: str = KEY) -> dict[str, Any]:
        """SGLang's own GET, asked directly."""
        reply = httpx.get(
            f"{self.server_url}/hicache/storage-backend",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body

    def live(self, change: dict[str, Any]) -> dict[str, Any]:
        response = self.agent.http.post(
            "/v1/live/operations", json={"actor": "ana", "change": change}
        )
        assert response.status_code == 202, response.text
        return follow(self.agent.http, int(response.json()["id"]))


@pytest.fixture(scope="module")
def stack(side: SideVenv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """An agent holding the admin key of a real server started with ``--admin-api-key``."""
    root = tmp_path_factory.mktemp("live")
    model = root / "tiny-llama"  # the module's own copy: the teardown stops what names it
    shutil.copytree(side.model, model)
    storage = root / "hicache-files"
    storage.mkdir()
    port = free_port()
    command = server_argv(
        side.python,
        model,
        port,
        "--enable-hierarchical-cache",
        "--hicache-size",
        "1",
        "--admin-api-key",
        KEY,
    )
    url = f"http://127.0.0.1:{port}"
    config = write_agent_config(root, command, url, server_environ({}))
    text = config.read_text(encoding="utf-8").replace(
        "\n\n[agent.env]",
        f'\nadmin_api_key_env = "{KEY_ENV}"\nlive_idle_timeout_s = 3\n\n[agent.env]',
    )
    config.write_text(text, encoding="utf-8")
    with run_agent(config, root, {**clean_environ(), KEY_ENV: KEY}) as agent:
        try:
            first = agent.operate({"kind": OperationKind.RESTART, "actor": "ana"})
            assert first["state"] == OperationState.READY, first["events"][-3:]
            yield LiveStack(agent, url, storage)
        finally:
            stop_servers_of(model)


def _assert_ready(operation: dict[str, Any]) -> None:
    assert operation["state"] == OperationState.READY, [
        (event["phase"], event["message"]) for event in operation["events"][-4:]
    ]


def test_attach_policy_restart_and_detach_each_verified_by_sglang(stack: LiveStack) -> None:
    """The proposal says live; the file backend's attach, then write_back, each show in
    SGLang's GET and in status with no restart (same pid); a restart afterwards comes back
    with both (the command line carries them); a detach leaves no backend."""
    extra = json.dumps({"file_storage_path": str(stack.storage)})
    change = {"kind": "storage_attach", "backend": "file", "extra_config": extra}
    plan = stack.agent.http.post("/v1/live/plans", json=change).json()
    assert plan["mode"] == "live", plan
    pid = stack.agent.http.get("/v1/status").json()["server"]["pid"]

    _assert_ready(stack.live(change))
    shown = stack.sglang()
    assert shown["hicache_storage_backend"] == "file"
    assert json.loads(shown["hicache_storage_backend_extra_config"]) == {
        "file_storage_path": str(stack.storage)
    }
    status = stack.agent.http.get("/v1/status").json()
    assert status["server"]["pid"] == pid
    assert status["hicache_live"]["live"]["storage_backend"] == "file"
    assert status["hicache_live"]["command_line"]["storage_backend"] == "file"

    _assert_ready(stack.live({"kind": "write_policy", "policy": "write_back"}))
    assert stack.sglang()["hicache_write_policy"] == "write_back"
    assert stack.agent.http.get("/v1/status").json()["server"]["pid"] == pid

    restarted = stack.agent.operate({"kind": OperationKind.RESTART, "actor": "ana"})
    _assert_ready(restarted)
    assert stack.agent.http.get("/v1/status").json()["server"]["pid"] != pid
    kept = stack.sglang()
    assert kept["hicache_storage_backend"] == "file"
    assert kept["hicache_write_policy"] == "write_back"

    _assert_ready(stack.live({"kind": "storage_detach"}))
    assert stack.sglang()["hicache_storage_backend"] is None


def test_a_change_while_generates_run_is_refused_and_changes_nothing(stack: LiveStack) -> None:
    """While /generate requests run (two loops of them, so the server is never idle) SGLang
    itself refuses the attach ("Reject attach: scheduler is not idle"), and the agent's live
    change gives up waiting for idle, changing nothing; SGLang's GET shows no backend."""
    url = stack.server_url
    stop = threading.Event()

    def generate() -> None:
        with httpx.Client(timeout=600) as http:
            while not stop.is_set():
                http.post(f"{url}/generate", json=LONG_GENERATE)

    loops = [threading.Thread(target=generate) for _ in range(2)]
    with SGLangClient(url, timeout=30, admin_api_key=Secret(KEY)) as client:
        for loop in loops:
            loop.start()
        try:
            for _ in range(300):
                load = client.load()
                if load is not None and load.running:
                    break
                stop.wait(0.1)
            assert load is not None
            assert load.running >= 1
            refused = client.attach_storage("file")
            assert refused.status_code == 400
            assert refused.message.startswith(
                "Failed to attach HiCache storage backend.\n"
                "Reject attach: scheduler is not idle. #queue-req=0 #running-req="
            )
            operation = stack.live({"kind": "storage_attach", "backend": "file"})
            assert operation["state"] == OperationState.FAILED
            outcome = operation["operation"]["outcome"]
            assert "the server was not idle within 3 s (" in outcome
            assert outcome.endswith("nothing was changed")
            assert stack.sglang()["hicache_storage_backend"] is None
        finally:
            stop.set()
            for loop in loops:
                loop.join(timeout=600)


def test_a_wrong_admin_key_is_refused_by_sglang(stack: LiveStack) -> None:
    """SGLang answers 401 Unauthorized to a wrong key, and GET shows nothing changed."""
    with SGLangClient(stack.server_url, timeout=30, admin_api_key=Secret("wrong")) as client:
        reply = client.attach_storage("file")
        assert (reply.status_code, reply.message) == (401, "Unauthorized")
        assert client.storage_status().status_code == 401
    assert stack.sglang()["hicache_storage_backend"] is None
