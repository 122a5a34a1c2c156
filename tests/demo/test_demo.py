"""The demo end to end: simulator, agent over real HTTP, store, as `make demo` runs them."""

from __future__ import annotations

import re
import subprocess
import sys


def test_demo_refuses_300_and_brings_ratio_4_to_ready() -> None:
    """The scripted on-call session refuses 8 x 300 GB, applies ratio 4 to ready, and records
    all three revisions in the audit (at a small simulated time scale)."""
    result = subprocess.run(
        [sys.executable, "-m", "bot.demo", "--time-scale", "0.005"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "REFUSED: size 300 GB/rank needs 8 ranks x 300.00 GB = 2400.0 GB" in out
    # The model's config gives 70,272 B/token: 159,274 x 4 + 1 page = 637,097 tokens x 70,272 B
    # = 44.77 GB/rank planned, as SGLang's log then says (docs/sglang.md#host-pool-sizing).
    assert "ratio 4 needs 8 ranks x 44.77 GB = 358.2 GB" in out
    assert "host pool: 44.77 GB per rank" in out
    assert out.count("=> ready") == 2
    history = out[out.index("/kimi history") :]
    rows = [line for line in history.splitlines() if re.match(r"^\d+\s+kimi-01\s", line)]
    assert [row.split()[2] for row in rows] == ["ready", "refused", "ready"]
