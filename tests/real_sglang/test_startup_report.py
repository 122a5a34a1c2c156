"""``kimi-ops startup-report`` on the log of a real SGLang 0.5.23 start (no agent involved)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.real_sglang._report import assert_ready_report, startup_report
from tests.real_sglang.conftest import RealStart

pytestmark = pytest.mark.real_sglang

# Allocating kv hierarchical KV host pool: 3906251 tokens, 1.00 GB host memory.
HOST_POOL_LINE = re.compile(r"Allocating kv hierarchical KV host pool: (\d+) tokens, ([\d.]+) GB")


def test_the_report_of_a_real_ready_start(real_start: RealStart, tmp_path: Path) -> None:
    """The report of a real start at --hicache-size 1 says ready, the 16,384-token device pool,
    the host pool of 1e9 // 256 + 1 tokens (1.00 GB) on one rank, and the phases in order."""
    tokens = int(1e9 // 256) // 1 * 1 + 1  # SGLang: size mode, then one extra page of 1 token
    logged = HOST_POOL_LINE.findall(real_start.run.log)
    assert logged == [(str(tokens), "1.00")]  # the real server agrees with the rule above
    code, report = startup_report(real_start.run.log, tmp_path / "server.log")
    assert_ready_report(code, report, real_start.run.log, host_tokens=tokens, host_gb=1.0)
