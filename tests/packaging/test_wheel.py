"""The wheel built from this checkout, installed into a fresh virtualenv outside it, runs the
commands an operator starts with: nothing it needs is left behind in the source tree.

Real parts only: ``python -m build --wheel`` on a copy of the checkout (a fresh copy, so no
``build/`` left from an earlier run can slip a deleted file into the wheel), ``python -m venv``
(without its own pip: the test's pip installs into it with ``--python``, which saves the
venv's ensurepip), ``pip install`` from the package registry or this machine's pip cache, and the
installed ``kimi-ops`` run as a subprocess from a directory outside the checkout.
The figures come from the field notes: ``--hicache-size 300`` read as a total but taken per rank,
8 ranks on a host with 445 GB available, refused.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[2]

# Left out of the copy the wheel is built from: environments, caches and earlier build output.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)

# `kimi-ops plan` exits 3 when the plan is refused (bot/cli.py's shared exit codes).
EXIT_REFUSED = 3


def _run(
    argv: list[str | Path], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    # The caller's environment minus anything that would let the checkout leak into the venv.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(
        [str(arg) for arg in argv], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def _expected_packaged_files() -> set[str]:
    """What the wheel must carry, listed from the checkout: migrations/ as bot/migrations, the
    simulator's profiles and model files, py.typed."""
    migrations = CHECKOUT / "migrations"
    expected = {
        "bot/migrations/" + path.relative_to(migrations).as_posix()
        for path in migrations.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    for pattern in ("sim/profiles/*.json", "sim/models/**/*"):
        expected |= {
            "bot/" + path.relative_to(CHECKOUT / "bot").as_posix()
            for path in (CHECKOUT / "bot").glob(pattern)
            if path.is_file() and "__pycache__" not in path.parts
        }
    expected.add("bot/py.typed")
    return expected


def _head_revision_of_checkout() -> str:
    """The newest migration, read from the scripts' text: the one no other revision follows."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in (CHECKOUT / "migrations" / "versions").glob("*.py"):
        text = script.read_text()
        revisions.update(re.findall(r'^revision: str = "(\w+)"', text, re.M))
        parents.update(re.findall(r'^down_revision: .* = "(\w+)"', text, re.M))
    (head,) = revisions - parents
    return head


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    """The wheel lists the migrations, profiles and model files, and once installed in a fresh
    venv it prints its version, migrates a SQLite file to head, refuses size 300 on 8 ranks and
    445 GB with exit 3, starts the simulator's CLI and plays the demo, all from outside the
    checkout."""
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = tmp_path / "source"
    shutil.copytree(CHECKOUT, source, ignore=NOT_SOURCES)
    _ok(_run([sys.executable, "-m", "build", "--wheel", "--outdir", dist, source], elsewhere))
    (wheel,) = dist.glob("kimi_ops-*.whl")

    shipped = set(zipfile.ZipFile(wheel).namelist())
    missing = _expected_packaged_files() - shipped
    assert not missing, f"the wheel lacks {sorted(missing)}"

    _ok(_run([sys.executable, "-m", "venv", "--without-pip", venv], elsewhere))
    python, kimi_ops = venv / "bin" / "python", venv / "bin" / "kimi-ops"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", wheel]
    _ok(_run(pip, elsewhere, timeout=300))

    imported_from = Path(_ok(_run([python, "-c", "import bot; print(bot.__file__)"], elsewhere)))
    assert venv in imported_from.parents, f"bot was imported from {imported_from}, not the venv"

    version = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["version"]
    assert _ok(_run([kimi_ops, "--version"], elsewhere)).strip() == f"kimi-ops {version}"

    database = f"sqlite:///{tmp_path / 'kimi-ops.db'}"
    head = _head_revision_of_checkout()
    _ok(_run([kimi_ops, "db", "--url", database, "upgrade"], elsewhere))
    assert _ok(_run([kimi_ops, "db", "--url", database, "current"], elsewhere)).strip() == (
        f"{head} (head)"
    )

    refused = _run(
        [kimi_ops, "plan", "--size", "300", "--ranks", "8", "--available-gb", "445"], elsewhere
    )
    assert refused.returncode == EXIT_REFUSED, refused.stderr
    assert "refused" in refused.stdout.lower()

    assert "--model-path" in _ok(_run([python, "-m", "bot.sim", "--help"], elsewhere))

    # The whole demo from the wheel: simulator, agent, store and core, each a real part; its
    # script exits 0 only when every step did what it should.
    demo = _ok(_run([kimi_ops, "demo", "--script", "--time-scale", "0.005"], elsewhere, 300))
    assert "READY kimi-01" in demo
