"""`kimi-ops startup-report`: text and JSON output, exit codes, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main
from tests.startup.conftest import LOGS


def test_text_report_of_a_ready_start(capsys: pytest.CaptureFixture[str]) -> None:
    """A ready start prints its verdict, timeline and figures, and exits 0."""
    code = main(["startup-report", str(LOGS / "ready_ratio4_v0.5.9.log")])
    out = capsys.readouterr().out
    assert code == 0
    assert "ready at 2026-02-24 11:26:38 after 8:08" in out
    assert "load_weights  2026-02-24 11:18:41  2026-02-24 11:23:41       5:00" in out
    assert "host pool GB per rank: 44.77 on each of 8 ranks; total 358.16 GB" in out
    assert "ranks: 8 (TP0, TP1, TP2, TP3, TP4, TP5, TP6, TP7)" in out
    # 0.5.9's uvicorn lines carry no time: the pin, HTTP and warmup are one dated stretch
    # (11:24:01 to 11:26:38), not a 0:00 pin and a 2:37 warmup.
    assert "host_pool to ready took 2:37 in all" in out
    assert "warmup        -" in out


def test_text_report_of_a_failed_start(capsys: pytest.CaptureFixture[str]) -> None:
    """A failed start prints the kind and its decisive lines, and exits 1."""
    code = main(["startup-report", str(LOGS / "host_memory_v0.5.23.log")])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED (host_memory)" in out
    assert "  ValueError: Not enough host memory available. Requesting 48.00 GB" in out


def test_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one object with ISO times, per-rank figures and the failure."""
    code = main(["startup-report", str(LOGS / "oom_killed_v0.5.23.log"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["phases"][0] == {
        "name": "init",
        "start": "2026-03-03T14:05:00",
        "end": "2026-03-03T14:05:11",
        "seconds": 11.0,
    }
    assert data["host_tokens_per_rank"]["TP7"] == 683061
    assert data["kv_gib_per_rank"]["TP0"] == 10.42
    assert data["ranks"] == [f"TP{i}" for i in range(8)]
    assert data["ready"] is False
    assert data["ready_at"] is None
    assert data["failure"]["kind"] == "oom_killed"


def test_unfinished_start_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A start that neither failed nor became ready exits 1 and says where it stopped."""
    code = main(["startup-report", str(LOGS / "hicache300_hang_v0.5.9.log")])
    assert code == 1
    assert "not ready (last phase: host_pool)" in capsys.readouterr().out


def test_missing_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing log exits 2 with a message naming the path, and prints no report."""
    path = tmp_path / "missing.log"
    code = main(["startup-report", str(path)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert f"log file '{path}' does not exist" in captured.err


@pytest.mark.slow
def test_real_command_line() -> None:
    """`python -m bot startup-report --json` runs as a process and prints parseable JSON."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            "startup-report",
            str(LOGS / "ready_size48_v0.5.23.log"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["host_gb_per_rank"]["TP3"] == 48.0


def test_text_report_shows_sglangs_headroom_beside_the_host_pools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A start that logged SGLang's headroom line shows it, the GB it sized within and the host
    pools it took, in one line."""
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-11-30 10:00:02 TP0] HiCache memory headroom: host 123.4 GiB, cgroup 13.0 GiB\n"
        "[2026-11-30 10:00:03 TP0] Allocating kv hierarchical KV host pool: 56923 tokens, "
        "2.00 GB host memory.\n"
    )
    main(["startup-report", str(log)])
    out = capsys.readouterr().out
    assert (
        "memory headroom SGLang saw: host 123.4 GiB, cgroup 13.0 GiB; it sized within 13.0 GiB "
        "(14.0 GB), the host pools took 2.00 GB"
    ) in out


def test_text_report_says_no_limit_for_cgroup_v1s_unlimited_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On cgroup v1 SGLang logs the line with no limit set: the unlimited
    ``memory.limit_in_bytes`` reads as 8589934589.4 GiB (a real 0.5.23 log), shown as no limit."""
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-12-01 07:49:10] HiCache memory headroom: host 21.2 GiB, cgroup 8589934589.4 GiB\n"
    )
    main(["startup-report", str(log)])
    out = capsys.readouterr().out
    assert (
        "memory headroom SGLang saw: host 21.2 GiB, cgroup no limit; it sized within 21.2 GiB "
        "(22.8 GB)"
    ) in out
