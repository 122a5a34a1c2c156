"""kimi-ops' auto-sizing against SGLang 0.5.23's own ``auto_size_hicache``, on the same inputs.

SGLang's function runs in the side virtualenv (``auto_size_driver.py``), allocation-free: each
case gives one rank's budget (what ``host_memory_budget_bytes`` hands it) and its device bytes.
The least over ranks is SGLang's all-reduce MIN, taken here over the ranks' separate runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bot.planner import SGLANG_HOST_RESERVE_BYTES, AutoSize, auto_size
from bot.startup import HiCacheAutoSized, StartupParser
from tests.real_sglang._side import SideVenv
from tests.real_sglang.conftest import clean_environ, server_environ

pytestmark = pytest.mark.real_sglang

DRIVER = Path(__file__).with_name("auto_size_driver.py")
GIB = 1024**3
# (ranks on the host, each rank's device bytes, the host's headroom in bytes)
CASES = [
    (1, [10 * GIB], 25 * GIB),  # lowered: 2.000 -> 1.140
    (1, [10 * GIB], 400 * GIB),  # room to spare: stays 2.000
    (2, [4_908_527_136, 4_908_527_136], 24 * GIB),  # small-2gpu in a 24 GiB cgroup
    (4, [6 * GIB, 9 * GIB, 7 * GIB, 6 * GIB], 70 * GIB + 3),  # PP stages: the largest pool sets it
    (8, [14_703_820_800] * 8, 449_000_000_000),  # Kimi-K2.5 on the field notes' host
]


def run_sglang(side: SideVenv, cases: list[dict[str, int]]) -> dict[str, object]:
    done = subprocess.run(
        [str(side.python), str(DRIVER)],
        input=json.dumps({"model": str(side.model), "cases": cases}),
        env=server_environ(clean_environ()),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_our_ratio_is_sglang_s_within_a_tenth_of_a_percent(side: SideVenv) -> None:
    """On each case SGLang's auto_size_hicache and ours pick the same ratio (0.1%), with the
    same reserve and slack; auto-sizing is on only with neither a ratio nor a size."""
    per_rank_cases = []
    for ranks, devices, headroom in CASES:
        budget = (headroom - 10 * GIB) // ranks
        per_rank_cases += [{"budget_bytes": budget, "device_bytes": d} for d in devices]
    sglang = run_sglang(side, per_rank_cases)
    assert sglang["reserve_bytes"] == SGLANG_HOST_RESERVE_BYTES
    assert sglang["slack"] == 0.05
    assert sglang["fractions"] == {"none": 0.8, "ratio": None, "size": None}
    ratios = iter(sglang["ratios"])  # type: ignore[call-overload]
    lowered = 0
    for ranks, devices, headroom in CASES:
        theirs = min(next(ratios) for _ in devices)
        ours = auto_size(headroom, devices, ranks)
        assert isinstance(ours, AutoSize)
        assert ours.ratio == pytest.approx(theirs, rel=1e-3), (ranks, devices, headroom)
        lowered += ours.lowered
    assert lowered >= 3  # the cases test the formula, not only the 2.0 cap


def test_the_parser_reads_the_line_sglang_logs(side: SideVenv) -> None:
    """The line SGLang's own function logs is read by the startup parser, ratio and all."""
    sglang = run_sglang(side, [{"budget_bytes": 15 * GIB, "device_bytes": 10 * GIB}])
    (line,) = sglang["log"]  # type: ignore[misc]
    parser = StartupParser()
    events = parser.feed(f"[2026-12-01 21:00:00] {line}\n")
    found = [e for e in events if isinstance(e, HiCacheAutoSized)]
    assert len(found) == 1, events
    assert found[0].requested == 2.0
    assert found[0].ratio == pytest.approx(1.14)
    assert found[0].budget_gib == 12.0
    assert found[0].ranks == 1
