"""Fixtures for the simulator's tests: run ``python -m bot.sim`` as a real subprocess."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests._ports import free_port as free_port

LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)((?: (?:DP|PP|TP|EP)\d+)*)\] (.*)$")
WAIT_S = 60.0


class Sim:
    """One simulator subprocess, its output captured in files (no pipe can fill up)."""

    def __init__(
        self, args: list[str], env: dict[str, str], folder: Path, module: str, merged: bool
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.out_path = folder / "stdout.txt"
        self.err_path = folder / "stderr.txt"
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdout=out,
                stderr=subprocess.STDOUT if merged else err,
                env=env,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stdout(self) -> str:
        return self.out_path.read_bytes().decode("utf-8")

    def stderr(self) -> str:
        return self.err_path.read_bytes().decode("utf-8")

    def messages(self) -> list[tuple[str, str]]:
        """(rank prefix, message) of every log line; continuation lines are skipped."""
        out = []
        for line in self.stdout().splitlines():
            match = LINE.match(line)
            if match:
                out.append((match.group(2).strip(), match.group(3)))
        return out

    def wait_for(self, text: str, timeout: float = WAIT_S) -> None:
        """Wait until ``text`` appears in stdout; fail if the process ends or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stdout():
                return
            if self.proc.poll() is not None:
                if text in self.stdout():
                    return
                pytest.fail(
                    f"simulator exited {self.proc.returncode} before {text!r}:\n"
                    f"{self.stdout()[-3000:]}\n{self.stderr()[-2000:]}"
                )
            time.sleep(0.02)
        pytest.fail(f"no {text!r} within {timeout} s:\n{self.stdout()[-3000:]}")

    def wait(self, timeout: float = WAIT_S) -> int:
        return self.proc.wait(timeout=timeout)

    def port(self) -> int:
        match = re.search(r"Uvicorn running on http://[^:]+:(\d+) ", self.stdout())
        assert match, self.stdout()[-2000:]
        return int(match.group(1))

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)


@pytest.fixture
def sim_env(tmp_path: Path) -> dict[str, str]:
    """A child environment with no inherited KIMI_* variable and a private state folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
    env.update(
        KIMI_SIM_STATE_DIR=str(tmp_path / "state"),
        KIMI_SIM_PROFILE="small-2gpu",
        KIMI_SIM_TIME_SCALE="0.01",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def run_sim(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """Start simulators (``python -m bot.sim`` or another module); all are killed at teardown.

    ``merged=True`` sends stderr into the stdout file, as a service's log file holds both.
    """
    started: list[Sim] = []

    def start(
        args: list[str], env: dict[str, str], module: str = "bot.sim", merged: bool = False
    ) -> Sim:
        sim = Sim(args, env, tmp_path / f"run{len(started)}", module, merged)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.kill()
