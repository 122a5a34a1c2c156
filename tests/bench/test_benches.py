"""Every bench in ``bench/`` runs in its quick size and prints exactly one JSON line: its name,
the figures it promises, each target beside its measurement, and the load it ran under.

The benches run as ``make bench`` runs them: ``python bench/<name>.py``, a real subprocess with
the real simulator, agents and stores they start themselves. Whether a target is met depends on
the machine, so it is not asserted here; that each target is reported is. The quick runs take
four minutes of the two cores together, so they are ``long``: ``make test-long`` runs them,
``make test`` keeps only the check that every bench is listed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"
# A quick run takes seconds alone; under a load average of 15 it may take minutes.
RUN_TIMEOUT_S = 540

# What each bench promises beyond the common keys: its figures, and how many targets it reports
# (store_write reports PostgreSQL's two only where a cluster can run).
EXPECTED: dict[str, tuple[tuple[str, ...], set[int]]] = {
    "agent_follow": (("ready_latency_ms_median", "follow_log_mb_per_s", "follow_cpu_percent",
                      "follow_rss_mb", "follow_rss_start_mb", "follow_rss_end_mb"), {4}),
    "fanout": (("seconds", "seconds_stand_in", "stand_in_delay_s", "repeat", "agents"), {6}),
    "fleet_rollout": (("rollout_s", "rollout_ok", "rollout_failed"), {1}),
    "guard": (("line_to_tree_gone_ms", "runs", "poll_interval_s"), {1}),
    "parse_throughput": (("mb_per_s", "grep_c_mb_per_s", "rss_growth_mb"), {1}),
    "report_post": (("hosts_1", "hosts", "runs"), {1}),
    "reports_parallel": (("one_host_s", "all_hosts_s", "hosts"), {1}),
    "slack_ack": (("ack_ms", "ready_to_final_update_ms", "chat_update_calls"), {5}),
    "store_write": (("sqlite", "postgresql", "revisions"), {2, 4}),
    "web_page": (("updates", "update_to_page_ms"), {1}),
}  # fmt: skip


def _scripts() -> list[str]:
    return sorted(p.stem for p in BENCH.glob("[!_]*.py"))


def test_every_bench_is_listed_here() -> None:
    """Each script ``make bench`` runs has its promised keys written down in this test."""
    assert _scripts() == sorted(EXPECTED)


def _run_quick(name: str) -> list[str]:
    try:
        done = subprocess.run(
            [sys.executable, str(BENCH / f"{name}.py"), "--quick"],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            cwd=BENCH.parent,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"bench/{name}.py --quick did not finish in {RUN_TIMEOUT_S} s: {exc.stderr}")
    assert done.returncode == 0, f"bench/{name}.py --quick failed:\n{done.stderr[-3000:]}"
    return done.stdout.splitlines()


@pytest.mark.long
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_quick_run_prints_one_json_line_with_its_targets(name: str) -> None:
    """``bench/<name>.py --quick`` prints one JSON line with its figures, each target as
    figure/measured/target/met, ``met`` true only when all are, and the load before and after."""
    lines = _run_quick(name)
    assert len(lines) == 1, f"{name} printed {len(lines)} lines: {lines}"
    line: dict[str, Any] = json.loads(lines[0])
    figures, target_counts = EXPECTED[name]
    assert line["bench"] == name
    missing = [key for key in figures if key not in line]
    assert not missing, f"{name} lacks {missing}: {line}"
    targets = line["targets"]
    assert len(targets) in target_counts, targets
    for target in targets:
        assert set(target) == {"figure", "measured", "target", "met"}, target
        assert isinstance(target["met"], bool)
        assert isinstance(target["measured"], int | float)
        assert target["target"].split()[0] in ("<", "<=", ">=")
    assert line["met"] is all(t["met"] for t in targets)
    assert len(line["load"]["start"]) == 3
    assert len(line["load"]["end"]) == 3
