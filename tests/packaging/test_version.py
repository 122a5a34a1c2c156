"""`kimi-ops --version` prints the version pyproject.toml declares, from the installed metadata."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bot import __version__
from bot.cli import main

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
DECLARED = tomllib.loads(PYPROJECT.read_text())["project"]["version"]


def test_version_flag_prints_name_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints `kimi-ops <version>` on stdout and exits 0."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"kimi-ops {DECLARED}\n"


def test_package_version_is_the_declared_one() -> None:
    """bot.__version__ is the version in pyproject.toml, not a second copy of it."""
    assert __version__ == DECLARED


def test_version_flag_in_a_real_process() -> None:
    """`python -m bot --version` exits 0 with the same line, as an operator's shell runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "bot", "--version"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, f"kimi-ops {DECLARED}\n")
