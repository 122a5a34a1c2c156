"""Fixtures for the agent's tests: real child processes, always reaped."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

Spawn = Callable[..., subprocess.Popen[bytes]]

FAKE_SYSTEMD = Path(__file__).parent / "fake_systemd"


def fake_systemd_executables(directory: Path) -> tuple[Path, Path]:
    """The stand-in ``systemctl`` and ``journalctl`` of ``fake_systemd/``, copied into
    ``directory`` to run on this interpreter without ``site`` (``-S``; they use only the
    standard library).

    The agent asks ``systemctl show`` at every poll: through the originals'
    ``#!/usr/bin/env python3`` each call starts whatever ``python3`` comes first on PATH (a
    pyenv shim is two shells and a version lookup before Python), and ``site``'s work on top.
    """
    directory.mkdir(parents=True, exist_ok=True)
    copies = []
    for name in ("systemctl", "journalctl"):
        text = (FAKE_SYSTEMD / name).read_text(encoding="utf-8")
        shebang, _, body = text.partition("\n")
        assert shebang.startswith("#!"), f"fake_systemd/{name} lost its shebang"
        copy = directory / name
        copy.write_text(f"#!{sys.executable} -S\n{body}", encoding="utf-8")
        copy.chmod(0o755)
        copies.append(copy)
    return copies[0], copies[1]


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
        # A pipe the test asked for is closed here, not left to the garbage collector, whose
        # ResourceWarning would fail whichever test of this worker runs when it collects.
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float = 10.0,
    explain: Callable[[], str] | None = None,
) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout_s`` (a bounded wait),
    with what ``explain()`` says of where things stood."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            detail = "" if explain is None else f": {explain()}"
            pytest.fail(f"condition not met within {timeout_s} s{detail}")
        time.sleep(0.02)


PYTHON = sys.executable
