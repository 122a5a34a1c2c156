"""End to end over real HTTP: ``kimi-ops agent`` as a subprocess resizes the simulated server.

The agent runs with the process backend, the simulator (``python -m bot.sim``, the field notes'
kimi profile at a small time scale) as the server command, and ``probe = "sim"``. The server was
started before the agent (as by an earlier run of it): the agent re-attaches to it.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.agent.config import AgentSettings, load_agent_settings
from bot.agent.service import make_control
from bot.agent.sglang_client import SGLangClient
from tests.agent._api_helpers import TOKEN, TOKEN_ENV, agent_env, auth, run_agent, write_config
from tests.agent.conftest import PYTHON, wait_until

# Real subprocesses or a real server with simulated timings: not in the fast loop.
pytestmark = pytest.mark.slow

GB = 1e9
DEVICE_TOKENS = 159_274  # kimi-k25-8gpu at mem fraction 0.88
BYTES_PER_TOKEN = 70_272
# The phases of a resize, in the order DESIGN.md lists them.
PHASES = [
    "planned",
    "stopping",
    "waiting_gpus",
    "starting",
    "load_weights",
    "kv_pool",
    "cuda_graph",
    "host_pool",
    "http",
    "ready",
]


# Starts the server the way an earlier run of the agent would have, then exits: the server keeps
# running, recorded in the agent's state directory.
START_SERVER = (
    "import os, sys\n"
    "from pathlib import Path\n"
    "from bot.agent.config import load_agent_settings\n"
    "from bot.agent.service import make_control\n"
    'make_control(load_agent_settings(Path(sys.argv[1]), os.environ)).start("e2e:1")\n'
)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[tuple[Path, AgentSettings]]:
    """A config and the simulator already running under it; stopped afterwards."""
    config = write_config(tmp_path)
    settings = load_agent_settings(config, {TOKEN_ENV: TOKEN})
    client = SGLangClient(settings.server_url)
    try:
        subprocess.run(
            [PYTHON, "-c", START_SERVER, str(config)], env=agent_env(), check=True, timeout=60
        )
        wait_until(lambda: client.health() == 200, timeout_s=60)
        yield config, settings
    finally:
        client.close()
        make_control(settings).stop(grace_s=5)


def _follow(http: httpx.Client, op_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Long-poll until the operation ends (bounded), collecting every event once."""
    events: list[dict[str, Any]] = []
    after = 0
    for _ in range(120):
        body = http.get(f"/v1/operations/{op_id}", params={"after": after, "wait": 10}).json()
        events += body["events"]
        after = body["last_seq"]
        if body["state"] in ("ready", "failed", "rolled_back"):
            return body, events
    pytest.fail(f"operation {op_id} did not end")


def test_resize_ratio_2_to_4_over_http_reaches_ready(
    tmp_path: Path, started: tuple[Path, AgentSettings]
) -> None:
    """POST a resize, long-poll to ready with every phase in order, then status shows ratio 4
    and the ~44.77 GB/rank host pool."""
    config, settings = started
    old_pid = make_control(settings).status().main_pid
    env = agent_env()
    with (
        run_agent(tmp_path, ["--config", str(config)], env, settings.state_dir) as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        before = http.get("/v1/status").json()
        assert before["server"]["state"] == "running"
        assert before["server"]["pid"] == old_pid
        assert before["config"]["hicache_ratio"] == 2.0

        proposal = http.post("/v1/plans", json={"ratio": 4}).json()
        assert proposal["plan"]["verdict"] == "fits"
        response = http.post(
            "/v1/operations",
            json={
                "kind": "resize",
                "ratio": 4,
                "actor": "ana",
                "fingerprint": proposal["fingerprint"],
            },
        )
        assert response.status_code == 202, response.text
        op_id = response.json()["id"]

        final, events = _follow(http, op_id)
        assert final["state"] == "ready", events[-3:]
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
        phases = [event["phase"] for event in events]
        firsts = [phases.index(phase) for phase in PHASES]
        assert firsts == sorted(firsts), phases
        assert phases[-1] == "ready"
        progress = [event["progress"] for event in events]
        assert progress == sorted(progress)
        assert progress[0] >= 0
        assert progress[-1] == 1.0

        # A client that reconnects from the start gets the same events.
        replay = http.get(f"/v1/operations/{op_id}", params={"after": 0}).json()
        assert replay["events"] == events

        after = http.get("/v1/status").json()
        assert after["server"]["state"] == "running"
        assert after["server"]["pid"] != old_pid
        assert after["config"]["hicache_ratio"] == 4.0
        assert after["config"]["effective"] == "ratio 4 x device pool"
        expected_gb = (DEVICE_TOKENS * 4 + 1) * BYTES_PER_TOKEN / GB  # 44.77 GB per rank
        assert after["capacity"]["host_gb_per_rank"] == pytest.approx(expected_gb, abs=0.01)
        assert after["operation"] is None

        # A client long-polling when the agent is stopped gets its answer; the agent exits 0
        # without waiting out the poll.
        answers: list[int] = []
        poll = threading.Thread(
            target=lambda: answers.append(
                http.get(
                    f"/v1/operations/{op_id}", params={"after": events[-1]["seq"], "wait": 60}
                ).status_code
            )
        )
        poll.start()
        time.sleep(1.0)  # let the poll reach the agent (a start-up pause, not a measurement)
        assert agent.stop(signal.SIGTERM, timeout_s=30) == 0
        poll.join(timeout=30)
        assert answers == [200]


def test_agent_killed_mid_start_resumes_and_the_operation_ends_ready(
    tmp_path: Path, started: tuple[Path, AgentSettings]
) -> None:
    """SIGKILL the agent while the new server loads its weights, start it again: the operation
    ends ready, its event list has no gap, and the server was started only once."""
    config, settings = started
    args = ["--config", str(config)]
    with run_agent(tmp_path, args, agent_env(), settings.state_dir) as first:
        with httpx.Client(base_url=first.url, headers=auth(), timeout=30) as http:
            response = http.post(
                "/v1/operations", json={"kind": "resize", "ratio": 4, "actor": "ana"}
            )
            assert response.status_code == 202, response.text
            op_id = response.json()["id"]
            after = 0
            for _ in range(120):
                body = http.get(
                    f"/v1/operations/{op_id}", params={"after": after, "wait": 10}
                ).json()
                after = body["last_seq"]
                if any(event["phase"] == "load_weights" for event in body["events"]):
                    break
                assert body["state"] == "running", body["events"]
            else:
                pytest.fail("the start never reached load_weights")
        first.process.kill()
        first.process.wait(timeout=10)

    with (
        run_agent(tmp_path, args, agent_env(), settings.state_dir) as second,
        httpx.Client(base_url=second.url, headers=auth(), timeout=30) as http,
    ):
        final, events = _follow(http, op_id)
        assert final["state"] == "ready", events[-3:]
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
        assert [event["phase"] for event in events].count("starting") == 1
        assert http.get("/v1/status").json()["config"]["hicache_ratio"] == 4.0
        assert second.stop(signal.SIGTERM) == 0
