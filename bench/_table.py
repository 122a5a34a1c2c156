"""The table of ``docs/benchmarks.md`` from the JSON lines ``make bench`` printed.

    make bench > bench.jsonl
    .venv/bin/python bench/_table.py < bench.jsonl

One row per target (figure, target, measured, met, the command that measured it), then each
bench's load average at its start and end; a bench whose line has no targets is listed so.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _measured(value: float, target: str) -> str:
    unit = target.split(" ", 2)[2] if target.count(" ") >= 2 else ""
    shown = f"{value:,.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"
    return f"{shown} {unit}".strip()


def rows(lines: list[dict[str, Any]]) -> list[str]:
    out = ["| figure | target | measured | met | command |", "|---|---|---|---|---|"]
    for line in lines:
        command = f"`.venv/bin/python bench/{line['bench']}.py`"
        if not line["targets"]:
            out.append(f"| {line['bench']}: no target | | | | {command} |")
        for target in line["targets"]:
            met = "yes" if target["met"] else "**no**"
            out.append(
                f"| {target['figure']} | {target['target']} | "
                f"{_measured(target['measured'], target['target'])} | {met} | {command} |"
            )
    return out


def loads(lines: list[dict[str, Any]]) -> list[str]:
    out = ["| bench | load average at start (1, 5, 15 min) | at end |", "|---|---|---|"]
    for line in lines:
        start, end = (", ".join(f"{x:.2f}" for x in line["load"][k]) for k in ("start", "end"))
        out.append(f"| {line['bench']} | {start} | {end} |")
    return out


def main() -> None:
    lines = [json.loads(text) for text in sys.stdin if text.strip()]
    if not lines:
        raise SystemExit("no JSON lines on stdin: pipe in what make bench printed")
    print("\n".join([*rows(lines), "", *loads(lines)]))


if __name__ == "__main__":
    main()
