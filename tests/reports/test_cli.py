"""``kimi-ops report`` as a subprocess against a real agent on the simulator."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from bot.reports import CHART_PX
from tests.chat.conftest import TOKEN, TOKEN_ENV, RunningAgent, free_port


def _config(root: Path, hosts: dict[str, str]) -> Path:
    lines = ["[store]", f'url = "sqlite:///{root / "kimi-ops.db"}"', ""]
    for name, url in hosts.items():
        lines += [f"[hosts.{name}]", f'url = "{url}"', f'token_env = "{TOKEN_ENV}"', ""]
    path = root / "kimi-ops.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", "report", *args],
        env={"PATH": "/usr/bin:/bin", TOKEN_ENV: TOKEN},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


@pytest.mark.slow
def test_report_writes_the_hosts_chart_and_its_figures_as_json(
    kimi: RunningAgent, tmp_path: Path
) -> None:
    """Exit 0; the JSON has the host's figures and the chart's name; the PNG decodes at
    CHART_PX."""
    config = _config(tmp_path, {"kimi-01": kimi.url})
    png = tmp_path / "kimi-01.png"
    done = _run("--config", str(config), "--host", "kimi-01", "--png", str(png), "--json")
    assert done.returncode == 0, done.stderr
    [host] = json.loads(done.stdout)
    assert host["host"] == "kimi-01"
    assert host["answered"] is True
    assert host["ranks"] == 8
    assert host["chart"]["size_px"] == list(CHART_PX)
    pixels = matplotlib.image.imread(io.BytesIO(png.read_bytes()), format="png")
    assert (pixels.shape[1], pixels.shape[0]) == CHART_PX


@pytest.mark.slow
def test_an_unreachable_host_is_reported_and_exits_1(tmp_path: Path) -> None:
    """The text names the silent host; the exit status is 1."""
    config = _config(tmp_path, {"kimi-02": f"http://127.0.0.1:{free_port()}"})
    done = _run("--config", str(config))
    assert done.returncode == 1
    assert "kimi-02: agent unreachable" in done.stdout


@pytest.mark.slow
def test_png_without_a_host_is_a_usage_error_that_touches_nothing(tmp_path: Path) -> None:
    """--png needs --host: exit 2 with the reason, no database created, no file written."""
    config = _config(tmp_path, {"kimi-02": f"http://127.0.0.1:{free_port()}"})
    done = _run("--config", str(config), "--png", str(tmp_path / "x.png"))
    assert done.returncode == 2
    assert "--host" in done.stderr
    assert not (tmp_path / "kimi-ops.db").exists()
    assert not (tmp_path / "x.png").exists()


@pytest.mark.slow
def test_without_png_the_text_says_the_chart_was_not_written(
    kimi: RunningAgent, tmp_path: Path
) -> None:
    """Exit 0, no file anywhere, and the chart line says it was not written and how to write
    it. Failed before the fix: it named a .png that nothing wrote."""
    config = _config(tmp_path, {"kimi-01": kimi.url})
    done = _run("--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [chart] = [line for line in done.stdout.splitlines() if line.startswith("  chart")]
    assert "not written (kimi-ops report --host H --png FILE writes it)" in chart
    assert ".png" not in chart
    assert list(tmp_path.glob("*.png")) == []


@pytest.mark.slow
def test_png_names_the_file_it_wrote(kimi: RunningAgent, tmp_path: Path) -> None:
    """With --png the chart line names the path written, and the JSON says where too."""
    config = _config(tmp_path, {"kimi-01": kimi.url})
    png = tmp_path / "c.png"
    text = _run("--config", str(config), "--host", "kimi-01", "--png", str(png))
    assert text.returncode == 0, text.stderr
    assert f"  chart     written to {png} (720x720)" in text.stdout
    as_json = _run("--config", str(config), "--host", "kimi-01", "--png", str(png), "--json")
    [host] = json.loads(as_json.stdout)
    assert host["chart"]["written_to"] == str(png)


@pytest.mark.slow
def test_png_in_a_directory_that_does_not_exist_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """No traceback: one line naming the directory, exit 2, no database created. Failed
    before the fix: a FileNotFoundError traceback after asking every agent."""
    config = _config(tmp_path, {"kimi-02": f"http://127.0.0.1:{free_port()}"})
    missing = tmp_path / "nonexistent" / "dir" / "x.png"
    done = _run("--config", str(config), "--host", "kimi-02", "--png", str(missing))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"kimi-ops report: --png {missing}: the directory {missing.parent} does not exist; "
        "name a file in an existing directory"
    ]
    assert not (tmp_path / "kimi-ops.db").exists()


@pytest.mark.slow
def test_an_unknown_host_is_a_bad_argument_exit_2(tmp_path: Path) -> None:
    """--host kimi-09 of a config without it: exit 2 (the README's bad arguments) with one line
    naming the hosts configured. Failed before the fix: exit 1."""
    config = _config(tmp_path, {"kimi-02": f"http://127.0.0.1:{free_port()}"})
    done = _run("--config", str(config), "--host", "kimi-09")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"kimi-ops report: --host kimi-09: no such host in {config} (configured: kimi-02)"
    ]
