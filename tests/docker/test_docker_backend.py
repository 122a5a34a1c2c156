"""The Docker backend against a real Docker daemon: ``kimi-ops agent`` as a subprocess drives a
container running the simulator (``python -m bot.sim``, small-2gpu) over its real HTTP API.

The container is made as a person would make it (``docker run`` through the SDK) with settings
of every kind the backend must keep; the agent is given its name. ``make test-docker`` runs
these (marker ``docker``); see ``tests/docker/conftest.py`` for the daemon and the image.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bot.agent.config import load_agent_settings
from bot.agent.control.docker import LABEL_OPERATION, LABEL_REPLACES
from bot.agent.sglang_client import SGLangClient
from tests.agent._api_helpers import TOKEN, TOKEN_ENV, agent_env, auth, run_agent
from tests.agent.conftest import wait_until
from tests.docker.conftest import MEMORY_LIMIT, Scene

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HICACHE_FLAGS = ("--enable-hierarchical-cache", "--hicache-ratio", "--hicache-size")
# Every HostConfig field the backend must carry to the new container, by name.
KEPT_HOST_CONFIG = (
    "Binds",
    "Mounts",
    "NetworkMode",
    "PidMode",
    "PortBindings",
    "IpcMode",
    "ShmSize",
    "Memory",
    "DeviceRequests",
    "Ulimits",
    "RestartPolicy",
)
KEPT_CONFIG = ("Env", "User", "WorkingDir", "Entrypoint", "StopSignal")


def _follow(http: httpx.Client, op_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Long-poll until the operation ends (bounded), collecting every event once."""
    events: list[dict[str, Any]] = []
    after = 0
    for _ in range(60):
        body = http.get(f"/v1/operations/{op_id}", params={"after": after, "wait": 10}).json()
        events += body["events"]
        after = body["last_seq"]
        if body["state"] in ("ready", "failed", "rolled_back"):
            return body, events
    pytest.fail(f"operation {op_id} did not end")


def _without_hicache(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        if token in HICACHE_FLAGS[1:]:
            skip = True
            continue
        if token != HICACHE_FLAGS[0]:
            out.append(token)
    return out


def _start_server(
    scene: Scene, env: dict[str, str] | None = None, memory: int = MEMORY_LIMIT
) -> str:
    settings = load_agent_settings(scene.config, {TOKEN_ENV: TOKEN})
    container_id = scene.create(list(settings.command), env, memory)
    client = SGLangClient(settings.server_url)
    try:
        wait_until(lambda: client.health() == 200, timeout_s=60)
    finally:
        client.close()
    return container_id


def test_a_resize_replaces_the_container_keeping_every_setting(scene: Scene) -> None:
    """A resize to ratio 3 ends ready in a new container NAME started with only the HiCache
    flags changed, every other setting (image, whole HostConfig, env, user, working dir, labels
    plus kimi-ops' own) equal to the old one's, which is kept stopped as NAME.previous; status
    shows the new pid and ratio 3."""
    old_id = _start_server(scene)
    old = scene.api.inspect_container(old_id)
    args = ["--config", str(scene.config)]
    state_dir = scene.tmp / "agent-state"
    with (
        run_agent(scene.tmp, args, agent_env(), state_dir) as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        before = http.get("/v1/status").json()
        assert before["server"]["state"] == "running", before
        assert before["server"]["pid"] == old["State"]["Pid"]
        assert before["host"]["backend"] == "docker"
        proposal = http.post("/v1/plans", json={"ratio": 3}).json()
        assert proposal["plan"]["verdict"] == "fits", proposal
        response = http.post(
            "/v1/operations",
            json={"kind": "resize", "ratio": 3, "actor": "ana",
                  "fingerprint": proposal["fingerprint"]},
        )  # fmt: skip
        assert response.status_code == 202, response.text
        op_id = response.json()["id"]
        final, events = _follow(http, op_id)
        assert final["state"] == "ready", events[-3:]
        after = http.get("/v1/status").json()

    containers = scene.containers()
    assert sorted(containers) == sorted([scene.name, f"{scene.name}.previous"])
    new, kept = containers[scene.name], containers[f"{scene.name}.previous"]
    assert kept["Id"] == old_id
    assert kept["State"]["Status"] == "exited"
    assert new["Id"] != old_id
    assert new["State"]["Status"] == "running"
    assert new["Image"] == old["Image"]
    for key in KEPT_HOST_CONFIG:
        assert new["HostConfig"].get(key) == old["HostConfig"].get(key), key
    assert new["HostConfig"] == old["HostConfig"]
    for key in KEPT_CONFIG:
        assert new["Config"].get(key) == old["Config"].get(key), key
    assert new["HostConfig"]["Memory"] == MEMORY_LIMIT
    labels = dict(new["Config"]["Labels"])
    assert labels.pop(LABEL_OPERATION) == f"{op_id}:1"
    assert labels.pop(LABEL_REPLACES) == old_id
    assert labels == old["Config"]["Labels"]
    old_cmd, new_cmd = old["Config"]["Cmd"], new["Config"]["Cmd"]
    assert _without_hicache(new_cmd) == old_cmd
    assert "--enable-hierarchical-cache" in new_cmd
    assert new_cmd[new_cmd.index("--hicache-ratio") + 1] == "3"

    assert after["server"]["state"] == "running"
    assert after["server"]["pid"] == new["State"]["Pid"]
    assert after["config"]["hicache_ratio"] == 3.0


def test_an_over_budget_start_is_killed_and_rolled_back_to_the_kept_container(
    scene: Scene,
) -> None:
    """SGLang allocating twice the planned pool (the simulator's host_pool_x:2) in the new
    container is killed by the guard (host_pool_over_budget) and rolled back: the new container
    is removed and the old one, NAME.previous, runs again under NAME without HiCache."""
    old_id = _start_server(scene, {"KIMI_SIM_FAIL": "host_pool_x:2,slow_pin:10"})
    args = ["--config", str(scene.config)]
    with (
        run_agent(scene.tmp, args, agent_env(), scene.tmp / "agent-state") as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        response = http.post("/v1/operations", json={"kind": "resize", "ratio": 3, "actor": "ana"})
        assert response.status_code == 202, response.text
        final, events = _follow(http, response.json()["id"])
        assert final["state"] == "rolled_back", events[-3:]
        assert final["operation"]["failure"]["kind"] == "host_pool_over_budget"
        after = http.get("/v1/status").json()

    containers = scene.containers()
    assert sorted(containers) == [scene.name]
    back = containers[scene.name]
    assert back["Id"] == old_id
    assert back["State"]["Status"] == "running"
    assert "--enable-hierarchical-cache" not in back["Config"]["Cmd"]
    assert after["server"]["pid"] == back["State"]["Pid"]
    assert after["config"]["enable_hierarchical_cache"] is False
    assert after["server"]["state"] == "running"


def test_a_container_that_does_not_run_sglang_is_refused_and_left_alone(scene: Scene) -> None:
    """A container NAME running ``sleep``: status names the reason, a resize is refused with it
    (503) and nothing changes: the same container runs, no other is made, nothing is written."""
    container_id = scene.create(["/usr/bin/sleep", "600"])
    args = ["--config", str(scene.config)]
    state_dir = scene.tmp / "agent-state"
    with (
        run_agent(scene.tmp, args, agent_env(), state_dir) as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        status = http.get("/v1/status").json()
        reason = f"container {scene.name!r} does not run SGLang's server"
        assert any(reason in problem for problem in status["problems"]), status["problems"]
        response = http.post("/v1/operations", json={"kind": "resize", "ratio": 3, "actor": "ana"})
        assert response.status_code == 503, response.text
        assert reason in response.json()["detail"]
        assert "'/usr/bin/sleep', '600'" in response.json()["detail"]

    containers = scene.containers()
    assert sorted(containers) == [scene.name]
    assert containers[scene.name]["Id"] == container_id
    assert containers[scene.name]["State"]["Status"] == "running"
    assert not (state_dir / "docker-command.json").exists()
    assert not (state_dir / "docker-start.json").exists()


def test_the_docker_daemon_unreachable_is_a_clear_error_and_changes_nothing(
    scene: Scene,
) -> None:
    """An agent pointed at a socket no daemon listens on: status and a resize both name the
    socket, the resize is refused (503) and the running container is left as it was."""
    container_id = _start_server(scene)
    socket = scene.tmp / "no-daemon.sock"
    text = scene.config.read_text(encoding="utf-8")
    scene.config.write_text(
        text.replace(f'docker_host = "{_docker_host(text)}"', f'docker_host = "unix://{socket}"'),
        encoding="utf-8",
    )
    args = ["--config", str(scene.config)]
    state_dir = scene.tmp / "agent-state"
    with (
        run_agent(scene.tmp, args, agent_env(), state_dir) as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        status = http.get("/v1/status").json()
        reason = f"cannot reach the Docker daemon at unix://{socket}"
        assert any(reason in problem for problem in status["problems"]), status["problems"]
        response = http.post("/v1/operations", json={"kind": "resize", "ratio": 3, "actor": "ana"})
        assert response.status_code == 503, response.text
        assert reason in response.json()["detail"]

    containers = scene.containers()
    assert sorted(containers) == [scene.name]
    assert containers[scene.name]["Id"] == container_id
    assert containers[scene.name]["State"]["Status"] == "running"
    assert not (state_dir / "docker-command.json").exists()


def _docker_host(config_text: str) -> str:
    return config_text.split('docker_host = "')[1].split('"')[0]


@pytest.mark.parametrize(
    "step", ["{name}.next:written", "{name}.previous:renamed", "{name}:renamed"]
)
def test_an_agent_killed_between_the_container_steps_resumes_to_one_name_and_one_previous(
    scene: Scene, step: str
) -> None:
    """SIGKILL the agent once the new container is created, once the old one is renamed
    NAME.previous, and once the new one is renamed NAME (KIMI_AGENT_CRASH_AT): a second agent
    resumes the resize to ready, with one running NAME (the new command, the same start) and
    the old container as the one NAME.previous."""
    old_id = _start_server(scene)
    args = ["--config", str(scene.config)]
    state_dir = scene.tmp / "agent-state"
    crash = agent_env(KIMI_AGENT_CRASH_AT=step.format(name=scene.name))
    with run_agent(scene.tmp, args, crash, state_dir) as first:
        with httpx.Client(base_url=first.url, headers=auth(), timeout=30) as http:
            response = http.post(
                "/v1/operations", json={"kind": "resize", "ratio": 3, "actor": "ana"}
            )
            assert response.status_code == 202, response.text
            op_id = response.json()["id"]
        assert first.process.wait(timeout=60) == -9, first.stderr()

    with (
        run_agent(scene.tmp, args, agent_env(), state_dir) as second,
        httpx.Client(base_url=second.url, headers=auth(), timeout=30) as http,
    ):
        final, events = _follow(http, op_id)
        assert final["state"] == "ready", events[-3:]
        after = http.get("/v1/status").json()

    containers = scene.containers()
    assert sorted(containers) == sorted([scene.name, f"{scene.name}.previous"])
    new, kept = containers[scene.name], containers[f"{scene.name}.previous"]
    assert kept["Id"] == old_id
    assert new["State"]["Status"] == "running"
    assert new["Config"]["Labels"][LABEL_OPERATION] == f"{op_id}:1"
    assert new["Config"]["Cmd"][new["Config"]["Cmd"].index("--hicache-ratio") + 1] == "3"
    assert after["server"]["pid"] == new["State"]["Pid"]


def test_a_restart_starts_the_same_container_and_a_rollback_returns_to_the_kept_one(
    scene: Scene,
) -> None:
    """After a resize to ratio 3: a restart starts the same container NAME again (a new run,
    no new container); a rollback to the revision before returns NAME to the original
    container, the kept NAME.previous, without HiCache."""
    old_id = _start_server(scene)
    args = ["--config", str(scene.config)]
    with (
        run_agent(scene.tmp, args, agent_env(), scene.tmp / "agent-state") as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        ops = {}
        for kind, body in (("resize", {"ratio": 3}), ("restart", {}), ("rollback", {})):
            if kind == "restart":
                resized = scene.api.inspect_container(scene.name)
            response = http.post("/v1/operations", json={"kind": kind, "actor": "ana", **body})
            assert response.status_code == 202, response.text
            final, events = _follow(http, response.json()["id"])
            assert final["state"] == "ready", (kind, events[-3:])
            ops[kind] = scene.api.inspect_container(scene.name)
        after = http.get("/v1/status").json()

    restarted = ops["restart"]
    assert restarted["Id"] == resized["Id"] != old_id
    assert restarted["State"]["StartedAt"] != resized["State"]["StartedAt"]
    assert restarted["State"]["Pid"] != resized["State"]["Pid"]
    rolled = ops["rollback"]
    assert rolled["Id"] == old_id
    assert "--enable-hierarchical-cache" not in rolled["Config"]["Cmd"]
    assert sorted(scene.containers()) == [scene.name]
    assert after["config"]["enable_hierarchical_cache"] is False
    assert after["server"]["pid"] == rolled["State"]["Pid"]


def test_the_new_container_stopped_by_hand_mid_start_is_rolled_back(scene: Scene) -> None:
    """Someone runs ``docker stop NAME`` while the new container pins its host pool: the start
    counts as failed (the agent did not stop it) and NAME.previous runs again under NAME."""
    old_id = _start_server(scene, {"KIMI_SIM_FAIL": "slow_pin:30"})
    args = ["--config", str(scene.config)]
    with (
        run_agent(scene.tmp, args, agent_env(), scene.tmp / "agent-state") as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        response = http.post("/v1/operations", json={"kind": "resize", "ratio": 3, "actor": "ana"})
        assert response.status_code == 202, response.text
        op_id = response.json()["id"]
        seen: list[str] = []
        after = 0
        while "host_pool" not in seen:
            body = http.get(f"/v1/operations/{op_id}", params={"after": after, "wait": 10}).json()
            seen += [event["phase"] for event in body["events"]]
            after = body["last_seq"]
            assert body["state"] == "running", seen
        stopped_by_hand = scene.api.inspect_container(scene.name)["Id"]
        assert stopped_by_hand != old_id
        scene.api.stop(stopped_by_hand, timeout=1)
        final, events = _follow(http, op_id)
        assert final["state"] == "rolled_back", events[-3:]

    containers = scene.containers()
    assert sorted(containers) == [scene.name]
    assert containers[scene.name]["Id"] == old_id
    assert containers[scene.name]["State"]["Status"] == "running"


def test_the_containers_cgroup_is_the_servers_memory_domain(scene: Scene) -> None:
    """With the host's own probe, status reads the running container's cgroup (by its main
    pid) with its 3 GiB memory limit; once the container is stopped, the cgroup it will start
    in again, with the same limit from HostConfig.Memory."""
    limit = 3 * 1024**3
    text = scene.config.read_text(encoding="utf-8")
    scene.config.write_text(text.replace('probe = "sim"', 'probe = "host"'), encoding="utf-8")
    container_id = _start_server(scene, memory=limit)
    args = ["--config", str(scene.config)]
    with (
        run_agent(scene.tmp, args, agent_env(), scene.tmp / "agent-state") as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        running = http.get("/v1/status").json()["ram"]
        scene.api.stop(container_id, timeout=5)
        stopped = http.get("/v1/status").json()["ram"]
    assert running["cgroup_limit_bytes"] == limit, running
    assert container_id in running["cgroup"]
    assert 0 < running["cgroup_headroom_bytes"] < limit
    assert stopped["cgroup_limit_bytes"] == limit, stopped
    assert container_id in stopped["cgroup"]
    assert stopped["cgroup_headroom_bytes"] == limit


def test_an_agent_killed_while_following_the_new_container_resumes_from_its_log(
    scene: Scene,
) -> None:
    """SIGKILL the agent while the new container pins its host pool, start it again: it reads
    the container's log from the start it recorded, the operation ends ready with no gap in its
    events, and the container was started once."""
    _start_server(scene, {"KIMI_SIM_FAIL": "slow_pin:20"})
    args = ["--config", str(scene.config)]
    state_dir = scene.tmp / "agent-state"
    with run_agent(scene.tmp, args, agent_env(), state_dir) as first:
        with httpx.Client(base_url=first.url, headers=auth(), timeout=30) as http:
            response = http.post(
                "/v1/operations", json={"kind": "resize", "ratio": 3, "actor": "ana"}
            )
            assert response.status_code == 202, response.text
            op_id = response.json()["id"]
            seen: list[str] = []
            after = 0
            while "host_pool" not in seen:
                body = http.get(
                    f"/v1/operations/{op_id}", params={"after": after, "wait": 10}
                ).json()
                seen += [event["phase"] for event in body["events"]]
                after = body["last_seq"]
                assert body["state"] == "running", seen
        first.process.kill()
        first.process.wait(timeout=10)
    started = scene.api.inspect_container(scene.name)

    with (
        run_agent(scene.tmp, args, agent_env(), state_dir) as second,
        httpx.Client(base_url=second.url, headers=auth(), timeout=30) as http,
    ):
        final, events = _follow(http, op_id)
        assert final["state"] == "ready", events[-3:]
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
        assert [event["phase"] for event in events].count("starting") == 1
        assert events[-1]["phase"] == "ready"

    now = scene.api.inspect_container(scene.name)
    assert now["Id"] == started["Id"]
    assert now["State"]["StartedAt"] == started["State"]["StartedAt"]


def test_a_rollback_to_an_older_revision_creates_its_container_from_the_recorded_command(
    scene: Scene,
) -> None:
    """Resizes to ratio 3 then 4, then a rollback to the first revision (no HiCache), which
    is no longer NAME.previous: a new container is created from NAME with that revision's
    command, and the ratio-4 container is kept as NAME.previous."""
    old_id = _start_server(scene)
    args = ["--config", str(scene.config)]
    with (
        run_agent(scene.tmp, args, agent_env(), scene.tmp / "agent-state") as agent,
        httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
    ):
        for ratio in (3, 4):
            body = {"kind": "resize", "ratio": ratio, "actor": "ana"}
            response = http.post("/v1/operations", json=body)
            assert response.status_code == 202, response.text
            final, events = _follow(http, response.json()["id"])
            assert final["state"] == "ready", events[-3:]
        ratio_4 = scene.api.inspect_container(scene.name)
        revisions = http.get("/v1/revisions").json()["revisions"]
        first = min(revisions, key=lambda revision: revision["id"])
        body = {"kind": "rollback", "revision": first["id"], "actor": "ana"}
        response = http.post("/v1/operations", json=body)
        assert response.status_code == 202, response.text
        final, events = _follow(http, response.json()["id"])
        assert final["state"] == "ready", events[-3:]

    containers = scene.containers()
    assert sorted(containers) == sorted([scene.name, f"{scene.name}.previous"])
    back, kept = containers[scene.name], containers[f"{scene.name}.previous"]
    assert kept["Id"] == ratio_4["Id"]
    assert back["Id"] not in (old_id, ratio_4["Id"])
    assert first["kind"] == "observed"
    assert back["Config"]["Cmd"] == first["argv"][1:]
    assert back["HostConfig"] == ratio_4["HostConfig"]
