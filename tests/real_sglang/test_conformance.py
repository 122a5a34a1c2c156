"""The simulator against the real SGLang 0.5.23: the same flags, the same line shapes.

The simulator is corrected from the real server, never the other way round: a difference fails
with the real line and the simulated line side by side. The simulator runs on a host profile of
this machine and model (``tiny-llama-cpu.json``: 256 KV bytes per token, the real server's
figures) so that only the shapes can differ, not the numbers.
"""

from __future__ import annotations

import json
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
# HiCache memory headroom: host 21.2 GiB, cgroup 8589934589.4 GiB
HEADROOM = re.compile(r"HiCache memory headroom: host [\d.]+ GiB, cgroup ([\d.]+) GiB")


def _profile_like(real_log: str, root: Path) -> Path:
    """The host profile, in a memory cgroup when the real server logged one: 0.5.23 logs its
    headroom line wherever its cgroup has a limit file (cgroup v1's "no limit" is a number), so
    the simulator is given a cgroup of the same room, which leaves every other figure alone."""
    seen = HEADROOM.search(real_log)
    if seen is None:
        return PROFILE
    profile = json.loads(PROFILE.read_text(encoding="utf-8"))
    # The simulator's room is its limit less the server's own RAM: add that RAM back.
    room_gb = float(seen.group(1)) * 1024**3 / 1e9
    profile["cgroup_limit_gb"] = room_gb + profile["server_ram_gb_main"]
    path = root / "profile-in-cgroup.json"
    path.write_text(json.dumps(profile), encoding="utf-8")
    return path


def _run_simulator(flags: list[str], root: Path, name: str, profile: Path = PROFILE) -> Run:
    port = str(free_port())
    at = flags.index("--port") + 1
    flags = [*flags[:at], port, *flags[at + 1 :]]
    env = {
        **clean_environ(),
        "KIMI_SIM_VERSION": "0.5.23",
        "KIMI_SIM_PROFILE": str(profile),
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
    profile = _profile_like(real_start.run.log, tmp_path)
    simulated = _run_simulator(real_start.flags, tmp_path, "sim", profile)
    refused = _refused_flags(simulated)
    if refused:
        problems.append(
            "[flags] the simulator exits 2 on flags the real server takes: "
            f"{' '.join(refused)}; the lines below come from a run without them"
        )
        kept = [flag for flag in real_start.flags if flag not in refused]
        simulated = _run_simulator(kept, tmp_path, "sim-without-refused", profile)
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
