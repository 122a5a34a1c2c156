"""Run one server start (the real SGLang or the simulator) to ready, then stop it, keeping its log.

stdout and stderr go to one file, as the agent's process backend writes them, so tqdm's bars
(stderr) interleave with the log lines (stdout) the way the parser meets them in production.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.real_sglang._agent import stop_process_tree

__all__ = ["READY_LINE", "Run", "run_to_ready"]

READY_LINE = "The server is fired up and ready to roll!"


@dataclass(frozen=True)
class Run:
    """How one start ended: its exit status when it exited by itself, and its whole log."""

    returncode: int | None
    log: str
    log_file: Path


def run_to_ready(
    argv: Sequence[str], env: Mapping[str, str], log_file: Path, timeout_s: float
) -> Run:
    """Start ``argv``; once its log says it is ready (or it exited), SIGTERM its process tree.

    AssertionError, with the log's tail, when it neither became ready nor exited in time.
    """
    with log_file.open("wb") as out:
        process = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout_s
        while READY_LINE not in log_file.read_text(errors="replace"):
            if process.poll() is not None:
                return Run(process.returncode, log_file.read_text(errors="replace"), log_file)
            if time.monotonic() > deadline:
                tail = log_file.read_text(errors="replace")[-3000:]
                raise AssertionError(f"{argv[:3]} not ready within {timeout_s:.0f} s:\n{tail}")
            time.sleep(0.2)
    finally:
        stop_process_tree(process.pid)
        process.wait(timeout=30)
    return Run(None, log_file.read_text(errors="replace"), log_file)
