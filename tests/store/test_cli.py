"""`kimi-ops db`: upgrade, current and downgrade, in-process and as a real command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main
from bot.store import current_revision, head_revision


def test_upgrade_current_downgrade(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """upgrade reports head, current says so, downgrade needs --yes and then empties the schema."""
    assert main(["db", "--url", db_url, "current"]) == 0
    assert "none (empty database)" in capsys.readouterr().out
    assert main(["db", "--url", db_url, "upgrade"]) == 0
    assert f"schema at {head_revision()} (head)" in capsys.readouterr().out
    assert main(["db", "--url", db_url, "current"]) == 0
    assert capsys.readouterr().out.strip() == f"{head_revision()} (head)"

    assert main(["db", "--url", db_url, "downgrade", "base"]) == 2
    assert "--yes" in capsys.readouterr().err
    assert current_revision(db_url) == head_revision()
    assert main(["db", "--url", db_url, "downgrade", "base", "--yes"]) == 0
    assert current_revision(db_url) is None


def test_database_url_comes_from_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --url, [store] url of the --config file names the database."""
    db = tmp_path / "from-config.db"
    config = tmp_path / "kimi-ops.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{db}"\n')
    assert main(["db", "--config", str(config), "upgrade"]) == 0
    assert current_revision(f"sqlite:///{db}") == head_revision()


def test_a_bad_revision_exits_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown target revision is a usage error that names it."""
    url = f"sqlite:///{tmp_path / 'kimi-ops.db'}"
    assert main(["db", "--url", url, "upgrade", "nope"]) == 2
    assert "'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_installed_command_works_from_any_directory(tmp_path: Path) -> None:
    """`kimi-ops db upgrade` run from an unrelated directory creates ./kimi-ops.db there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "bot", "db", "upgrade"],
        cwd=elsewhere, capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (elsewhere / "kimi-ops.db").is_file()
    assert current_revision(f"sqlite:///{elsewhere / 'kimi-ops.db'}") == head_revision()
