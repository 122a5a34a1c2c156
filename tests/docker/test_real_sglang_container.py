"""The Docker backend with the real SGLang 0.5.23 CPU server of ``make test-real`` in the
container: its side virtualenv and tiny model bind-mounted read-only, the stand-ins on its
``PYTHONPATH`` (``tests/real_sglang/_side.py``), the host's own probe. Needs the side virtualenv
(``make test-real`` builds it); fails saying so without it. Two real starts: minutes."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from bot.agent.sglang_client import SGLangClient
from tests.agent._api_helpers import agent_env, auth, run_agent
from tests.agent.conftest import wait_until
from tests.docker.conftest import Scene, docker_host
from tests.real_sglang._agent import TOKEN, write_agent_config
from tests.real_sglang._side import SERVER_ENV, free_port, locate_side_venv, server_argv

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

START_TIMEOUT_S = 600


def test_the_real_server_in_a_container_is_resized_to_ready(scene: Scene) -> None:
    """A container running the real SGLang with a 1 GB host pool per rank: the agent reads its
    command and the pool from its log, and ``resize size 2`` ends ready in a new container whose
    command has ``--hicache-size 2``, the old one kept as NAME.previous."""
    side = locate_side_venv(os.environ)
    cache = side.python.parents[2]  # .../kimi-realsgl, holding the venv and the model
    port = free_port()
    argv = server_argv(side.python, side.model, port, "--enable-hierarchical-cache",
                       "--hicache-size", "1")  # fmt: skip
    root = scene.tmp / "real"
    root.mkdir()
    config = write_agent_config(root, argv, f"http://127.0.0.1:{port}", {})
    text = config.read_text(encoding="utf-8").replace(
        'backend = "process"',
        f"backend = {json.dumps('docker')}\ncontainer = {json.dumps(scene.name)}\n"
        f"docker_host = {json.dumps(docker_host())}",
    )
    config.write_text(text, encoding="utf-8")
    scene.create(argv, dict(SERVER_ENV), memory=16 * 1024**3, extra_binds=[f"{cache}:{cache}:ro"])
    client = SGLangClient(f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: client.health() == 200, timeout_s=START_TIMEOUT_S)
    finally:
        client.close()

    state_dir = root / "agent-state"
    with (
        run_agent(
            root,
            ["--config", str(config)],
            agent_env(KIMI_AGENT_TOKEN=TOKEN),
            state_dir,
        ) as agent,
        httpx.Client(base_url=agent.url, headers=auth(TOKEN), timeout=60) as http,
    ):
        before = http.get("/v1/status").json()
        assert before["server"]["state"] == "running", before
        assert before["config"]["hicache_size"] == 1
        response = http.post(
            "/v1/operations", json={"kind": "resize", "size_gb": 2, "actor": "ana"}
        )
        assert response.status_code == 202, response.text
        op_id = response.json()["id"]
        after_seq = 0
        state = "running"
        events: list[dict[str, object]] = []
        for _ in range(200):
            body = http.get(
                f"/v1/operations/{op_id}", params={"after": after_seq, "wait": 10}
            ).json()
            events += body["events"]
            after_seq = body["last_seq"]
            state = body["state"]
            if state in ("ready", "failed", "rolled_back"):
                break
        assert state == "ready", events[-3:]
        after = http.get("/v1/status").json()

    containers = scene.containers()
    assert sorted(containers) == sorted([scene.name, f"{scene.name}.previous"])
    cmd = containers[scene.name]["Config"]["Cmd"]
    assert cmd[cmd.index("--hicache-size") + 1] == "2"
    assert after["config"]["hicache_size"] == 2
    assert after["capacity"]["host_gb_per_rank"] == pytest.approx(2.0, abs=0.05)
