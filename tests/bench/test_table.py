"""``bench/_table.py``: the rows of ``docs/benchmarks.md`` from the benches' JSON lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench._table import loads, rows

TABLE = Path(__file__).resolve().parents[2] / "bench" / "_table.py"
LINE = {
    "bench": "guard",
    "targets": [
        {"figure": "gone, median", "measured": 290.682, "target": "< 1000 ms", "met": True},
        {"figure": "ratio", "measured": 2.5, "target": "<= 2 x", "met": False},
    ],
    "load": {"start": [1.5, 2.0, 3.25], "end": [4.0, 5.0, 6.0]},
}


def test_one_row_per_target_with_its_unit_verdict_and_command() -> None:
    """Each target is a row: the measurement in the target's unit, a miss in bold, the command."""
    assert rows([LINE])[2:] == [
        "| gone, median | < 1000 ms | 290.68 ms | yes | `.venv/bin/python bench/guard.py` |",
        "| ratio | <= 2 x | 2.5 x | **no** | `.venv/bin/python bench/guard.py` |",
    ]


def test_a_bench_without_targets_is_listed_as_such() -> None:
    """A line with no targets still gets a row saying so, not silence."""
    assert rows([{**LINE, "targets": []}])[2:] == [
        "| guard: no target | | | | `.venv/bin/python bench/guard.py` |"
    ]


def test_the_load_at_start_and_end_of_each_bench() -> None:
    """The load averages are listed per bench as measured."""
    assert loads([LINE])[2:] == ["| guard | 1.50, 2.00, 3.25 | 4.00, 5.00, 6.00 |"]


def test_no_input_is_a_clear_error() -> None:
    """Nothing on stdin exits non-zero saying what to pipe in."""
    done = subprocess.run(
        [sys.executable, str(TABLE)], input="", capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "pipe in what make bench printed" in done.stderr
