"""``kimi-ops startup-report --json`` on a real SGLang log, and what a ready start's report holds.

The expectations are the real server's own figures (the ``Allocating ... host pool`` and
``max_total_num_tokens=`` lines) and SGLang's rules written out in the tests, never figures the
report computed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.vocab import EventPhase

__all__ = ["CPU_PHASES", "assert_ready_report", "first_stamp", "startup_report"]

#: The phases of a ready start on CPU, in order. No CUDA graph phase: SGLang logs "Cuda graph is
#: disabled because of using torch native attention backend" and captures none.
CPU_PHASES = [
    EventPhase.INIT,
    EventPhase.LOAD_WEIGHTS,
    EventPhase.KV_POOL,
    EventPhase.HOST_POOL,
    EventPhase.HTTP,
    EventPhase.WARMUP,
    EventPhase.READY,
]

# [2026-11-30 07:45:54] server_args={'model_path': ...}: the first line of a start SGLang dates.
_ARGS_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\] server_args=", re.MULTILINE)


def startup_report(log_text: str, path: Path) -> tuple[int, dict[str, Any]]:
    """Write ``log_text`` to ``path``, run ``kimi-ops startup-report --json`` on it; (exit code,
    the report)."""
    path.write_text(log_text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "bot", "startup-report", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.strip(), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, report


def first_stamp(log_text: str) -> datetime:
    """When the last start in ``log_text`` printed its arguments (its first dated line)."""
    stamps = _ARGS_LINE.findall(log_text)
    assert stamps, "the log holds no server_args= line"
    return datetime.fromisoformat(stamps[-1])


def assert_ready_report(
    code: int, report: dict[str, Any], log_text: str, host_tokens: int, host_gb: float
) -> None:
    """The report of a ready start on CPU: ready (exit 0), the device pool of
    ``--max-total-tokens``, the host pool SGLang logged, one rank, every phase in order from the
    server's first line."""
    assert code == 0, report
    assert report["ready"] is True
    assert report["failure"] is None
    assert report["dialect"] == "0.5.23"
    assert report["device_tokens"] == 16384
    # One rank (TP 1): one entry in every per-rank figure.
    assert list(report["device_tokens_per_rank"].values()) == [16384]
    assert list(report["host_tokens_per_rank"].values()) == [host_tokens]
    assert list(report["host_gb_per_rank"].values()) == [host_gb]
    names = [phase["name"] for phase in report["phases"]]
    assert names == CPU_PHASES, names
    starts = [phase["start"] for phase in report["phases"]]
    assert None not in starts, report["phases"]
    assert starts == sorted(starts), report["phases"]
    # The start begins with SGLang's first dated line, its arguments, not later.
    assert report["started_at"] == first_stamp(log_text).isoformat(), (
        f"the report starts the start at {report['started_at']}, the log's server_args= line is "
        f"at {first_stamp(log_text).isoformat()}"
    )
