"""Simulated SGLang replicas for the router's tests: ``python -m bot.sim`` subprocesses, each on
its own simulated host (a state folder of its own), serving ``/generate`` and ``/get_load``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fleet._routers import free_port

READY = "The server is fired up and ready to roll!"


@dataclass(frozen=True)
class SimReplica:
    """A simulator serving at ``url``; its log (uvicorn's access lines) is ``out``."""

    url: str
    out: Path

    def served(self) -> int:
        """How many ``POST /generate`` it answered 200 (its warmup's included)."""
        text = self.out.read_text(encoding="utf-8", errors="replace")
        return text.count('"POST /generate HTTP/1.1" 200 OK')


@contextlib.contextmanager
def serving_sims(root: Path, count: int, generate_s: float = 0.0) -> Iterator[list[SimReplica]]:
    """``count`` simulators up and ready. All are killed on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for n in range(count):
            folder = root / f"sim{n}"
            folder.mkdir(parents=True, exist_ok=True)
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
            env.update(
                KIMI_SIM_PROFILE="small-2gpu",
                KIMI_SIM_TIME_SCALE="0.002",
                KIMI_SIM_STATE_DIR=str(folder / "state"),
                KIMI_SIM_GENERATE_S=str(generate_s),
            )
            args = ["--model-path", "/models/m", "--tp", "2", "--port", str(port)]
            with (folder / "out.txt").open("wb") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "bot.sim", *args],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                )
            urls.append(f"http://127.0.0.1:{port}")
        for n, url in enumerate(urls):
            _wait_healthy(url, procs[n], root / f"sim{n}" / "out.txt")
        yield [SimReplica(url, root / f"sim{n}" / "out.txt") for n, url in enumerate(urls)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], out: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"simulator exited {proc.returncode}:\n{out.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    pytest.fail(f"simulator at {url} not healthy within 60 s:\n{out.read_text()[-2000:]}")
