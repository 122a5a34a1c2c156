"""Fixtures for the tests against a real Docker daemon, run by ``make test-docker``.

``tests/docker/setup_docker.sh start`` gives the daemon (its address in ``DOCKER_HOST``, or in
the file the script writes) and the image ``kimi-ops-test:empty``, which holds empty
directories only: each container bind-mounts the host's ``/usr`` and ``/lib``, the checkout and
its virtualenv read-only and runs the simulator from them, on the host's network and in the
host's pid namespace (the simulated host's state is shared by pid, between the containers'
simulators and the agent's probe). Without a daemon the tests fail saying how to get one.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from bot.agent.control.docker import DockerControl
from bot.clock import SystemClock
from tests.agent._api_helpers import SMALL, write_config

IMAGE = "kimi-ops-test:empty"
STATE_FILE = Path(os.environ.get("KIMI_DOCKER_STATE", "/run/kimi-ops-docker")) / "docker_host"
CHECKOUT = Path(__file__).resolve().parents[2]
NO_HICACHE = ("--mem-fraction-static", "0.7")
MEMORY_LIMIT = 64 * 1024**3  # above the simulated host's 60 GB: a limit the planner can meet


def docker_host() -> str:
    """The daemon the tests use: ``DOCKER_HOST``, else the one the setup script recorded."""
    host = os.environ.get("DOCKER_HOST", "").strip()
    if not host and STATE_FILE.is_file():
        host = STATE_FILE.read_text(encoding="utf-8").strip()
    if not host:
        pytest.fail("no Docker daemon: run tests/docker/setup_docker.sh start, or make test-docker")
    return host


@pytest.fixture(scope="session")
def api() -> Iterator[Any]:
    """A low-level client of the daemon, which has the test image."""
    client = docker.APIClient(base_url=docker_host(), version="1.41", timeout=60)
    try:
        client.inspect_image(IMAGE)
    except docker.errors.DockerException as exc:
        pytest.fail(f"the Docker daemon at {docker_host()} cannot serve {IMAGE}: {exc}")
    yield client
    client.close()


def read_only_binds() -> list[str]:
    """What the simulator needs from the host: the interpreter, its libraries, the checkout and
    its virtualenv."""
    paths = ["/usr", "/lib", "/lib64", "/bin", str(CHECKOUT)]
    for prefix in (Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()):
        if not any(Path(p) == prefix or Path(p) in prefix.parents for p in paths):
            paths.append(str(prefix))  # the virtualenv, the interpreter it was made from
    return [f"{path}:{path}:ro" for path in paths if Path(path).exists()]


@dataclass
class Scene:
    """One test's container name, its agent's config and settings, and the docker client."""

    tmp: Path
    name: str
    config: Path
    api: Any
    port: int

    def control(self) -> DockerControl:
        return DockerControl(self.name, docker_host(), self.tmp / "agent-state", SystemClock())

    def containers(self) -> dict[str, dict[str, Any]]:
        """Every container whose name starts with the scene's, by name, inspected."""
        found = self.api.containers(all=True, filters={"name": self.name})
        out = {}
        for summary in found:
            for name in summary["Names"]:
                if name.lstrip("/").startswith(self.name):
                    out[name.lstrip("/")] = self.api.inspect_container(summary["Id"])
        return out

    def create(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        memory: int = MEMORY_LIMIT,
        extra_binds: list[str] | None = None,
    ) -> str:
        """Create and start ``NAME`` running ``argv`` with settings a person would give."""
        sim_state = self.tmp / "sim-host"
        sim_state.mkdir(parents=True, exist_ok=True)
        environment = {
            "KIMI_SIM_PROFILE": SMALL,
            "KIMI_SIM_TIME_SCALE": "0.01",
            "KIMI_SIM_STATE_DIR": str(sim_state),
            "PYTHONDONTWRITEBYTECODE": "1",
            **(env or {}),
        }
        host_config = self.api.create_host_config(
            binds=[*read_only_binds(), f"{sim_state}:{sim_state}:rw", *(extra_binds or [])],
            network_mode="host",
            pid_mode="host",
            ipc_mode="private",
            shm_size="1g",
            mem_limit=memory,
            ulimits=[docker.types.Ulimit(name="nofile", soft=4096, hard=8192)],
            restart_policy={"Name": "unless-stopped"},
        )
        created = self.api.create_container(
            IMAGE,
            entrypoint=argv[:1],
            command=argv[1:],
            environment=environment,
            user="0:0",
            working_dir="/tmp",
            labels={"com.docker.compose.project": "kimi", "team": "inference"},
            stop_signal="SIGTERM",
            host_config=host_config,
            name=self.name,
            use_config_proxy=False,
        )
        self.api.start(created["Id"])
        return str(created["Id"])


@pytest.fixture
def scene(tmp_path: Path, api: Any) -> Iterator[Scene]:
    """A fresh container name and an agent config for it; every container of it removed after."""
    name = f"kimi-test-{uuid.uuid4().hex[:8]}"
    config = write_config(
        tmp_path,
        profile=SMALL,
        time_scale=0.01,
        hicache=NO_HICACHE,
        backend="docker",
        container=name,
        docker_host=docker_host(),
        headroom_gb=0,
    )
    text = config.read_text(encoding="utf-8")
    port = int(text.split('server_url = "http://127.0.0.1:')[1].split('"')[0])
    made = Scene(tmp_path, name, config, api, port)
    try:
        yield made
    finally:
        for found in made.containers().values():
            api.remove_container(found["Id"], force=True)
