"""Fixtures for the agent's tests: real child processes, always reaped."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start real processes for a test and kill whatever is left of them afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, **kwargs: object) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(list(argv), **kwargs)  # type: ignore[call-overload]
        started.append(process)
        return process

    yield start
    for process in started:
        try:
            tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(True)]
        except psutil.NoSuchProcess:
            tree = []
        for member in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        process.wait(timeout=10)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout_s`` (a bounded wait)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s} s")
        time.sleep(0.02)


PYTHON = sys.executable
