"""The real sglang-router binaries, one side virtualenv per worker-API generation.

``setup_router_venvs.sh`` builds them once into ``~/.cache/kimi-router/<version>`` (a clean
machine needs only the package registry); :func:`router_python` runs it for one version.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bot.fleet.router import RouterApi
from tests._ports import free_port as free_port

HERE = Path(__file__).resolve().parent
#: The release tested for each generation (pinned: each is a different Rust binary).
VERSIONS: dict[RouterApi, str] = {
    RouterApi.QUERY: "0.1.9",
    RouterApi.BY_URL: "0.2.4",
    RouterApi.BY_ID: "0.3.2",
}
_built: dict[str, Path] = {}


def router_python(version: str) -> Path:
    """The side virtualenv's python for ``version``, built on first use (fails, never skips)."""
    if version not in _built:
        env = {**os.environ, "KIMI_ROUTER_VERSIONS": version}
        done = subprocess.run(
            ["bash", str(HERE / "setup_router_venvs.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"sglang-router {version} cannot be installed:\n{done.stderr[-2000:]}")
        _built[version] = Path(done.stdout.strip().splitlines()[-1])
    return _built[version]


@dataclass
class RunningRouter:
    """A router subprocess; ``url`` is its HTTP API, ``metrics_url`` its Prometheus export."""

    version: str
    url: str
    metrics_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_router(
    version: str, workers: list[str], folder: Path, extra: tuple[str, ...] = ()
) -> RunningRouter:
    """``python -m sglang_router.launch_router`` on free ports, round robin over ``workers``
    (each must answer ``/health`` already: 0.1.x waits for them before it listens); ``extra``
    are more of its flags."""
    python = router_python(version)
    port, metrics_port = free_port(), free_port()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"router-{version}.log"
    args = [
        str(python), "-m", "sglang_router.launch_router",
        "--host", "127.0.0.1", "--port", str(port),
        # Each router exports Prometheus on 29000 unless told: two at once would collide.
        "--prometheus-port", str(metrics_port),
        "--policy", "round_robin",
        "--worker-startup-timeout-secs", "30",
        *extra,
    ]  # fmt: skip
    if workers:
        args += ["--worker-urls", *workers]
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"router {version} exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/liveness", timeout=2).status_code == 200:
                metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
                return RunningRouter(version, url, metrics_url, process, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    pytest.fail(f"router {version} did not listen within 60 s:\n{log.read_text()[-3000:]}")
