"""The simulator against the real SGLang 0.5.23: the same flags, the same line shapes.

The simulator is corrected from the real server, never the other way round: a difference fails
with the real line and the simulated line side by side. The simulator runs on a host profile of
this machine and model (``tiny-llama-cpu.json``: 256 KV bytes per token, the real server's
figures) so that only the shapes can differ, not the numbers.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.real_sglang._launch import Run, run_to_ready
from tests.real_sglang._shapes import compare, shaped_lines, unclassified_parsed_lines
from tests.real_sglang._side import free_port
from tests.real_sglang.conftest import RealStart, clean_environ

pytestmark = pytest.mark.real_sglang

PROFILE = Path(__file__).with_name("tiny-llama-cpu.json")
# argparse: "launch_server.py: error: unrecognized arguments: --device cpu --disable-overlap..."
UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)")


def _run_simulator(flags: list[str], root: Path, name: str) -> Run:
    port = str(free_port())
    at = flags.index("--port") + 1
    flags = [*flags[:at], port, *flags[at + 1 :]]
    env = {
        **clean_environ(),
        "KIMI_SIM_VERSION": "0.5.23",
        "KIMI_SIM_PROFILE": str(PROFILE),
        "KIMI_SIM_TIME_SCALE": "0.1",
        "KIMI_SIM_STATE_DIR": str(root / f"{name}-host"),
    }
    argv = [sys.executable, "-m", "bot.sim", *flags]
    return run_to_ready(argv, env, root / f"{name}.log", timeout_s=120)


def _refused_flags(run: Run) -> list[str]:
    """The flags argparse named as unrecognized when the simulator exited 2, else none."""
    match = UNRECOGNIZED.search(run.log) if run.returncode == 2 else None
    return match.group(1).split() if match else []


def test_the_simulator_prints_the_real_servers_line_shapes(
    real_start: RealStart, tmp_path: Path
) -> None:
    """Started with the real server's flags in its 0.5.23 dialect, the simulator accepts them
    and prints every line the parser reads with the real line's prefix, fields and order."""
    problems: list[str] = []
    simulated = _run_simulator(real_start.flags, tmp_path, "sim")
    refused = _refused_flags(simulated)
    if refused:
        problems.append(
            "[flags] the simulator exits 2 on flags the real server takes: "
            f"{' '.join(refused)}; the lines below come from a run without them"
        )
        kept = [flag for flag in real_start.flags if flag not in refused]
        simulated = _run_simulator(kept, tmp_path, "sim-without-refused")
    assert simulated.returncode is None, simulated.log[-3000:]
    assert unclassified_parsed_lines(simulated.log) == []
    problems += compare(shaped_lines(real_start.run.log), shaped_lines(simulated.log))
    assert not problems, (
        f"the simulator differs from the real SGLang 0.5.23 in {len(problems)} ways "
        "(fix the simulator, not this test):\n" + "\n".join(problems)
    )


def test_every_line_the_parser_reads_in_the_real_log_is_compared(real_start: RealStart) -> None:
    """Each real line on which the startup parser reports something is of a kind the
    conformance test compares, so no line the parser reads escapes the comparison."""
    assert unclassified_parsed_lines(real_start.run.log) == []
    assert shaped_lines(real_start.run.log), "the real log holds none of the lines compared"


def test_a_changed_line_is_shown_beside_the_real_one(real_start: RealStart) -> None:
    """The comparison fails on one field renamed in an otherwise identical log, showing the real
    line and the changed one side by side (the check can fail)."""
    real = real_start.run.log
    changed = real.replace("#tokens:", "#tokenz:", 1)
    differences = compare(shaped_lines(real), shaped_lines(changed))
    assert len(differences) == 1
    assert "#tokens: 16384" in differences[0]
    assert "#tokenz: 16384" in differences[0]
    assert compare(shaped_lines(real), shaped_lines(real)) == []
