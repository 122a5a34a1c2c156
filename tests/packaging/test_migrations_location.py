"""Where the store looks for its Alembic scripts: inside the installed package first, beside it in
a source tree, and a MigrationError naming both places when neither holds them.

Each case lays out a ``bot`` package directory in tmp_path the way a wheel or a checkout does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import MigrationError
from bot.store.migrate import MIGRATIONS_DIR, find_migrations


def _scripts_at(place: Path) -> Path:
    (place / "versions").mkdir(parents=True)
    (place / "env.py").write_text("# alembic env\n")
    return place


def test_wheel_layout_is_found_inside_the_package(tmp_path: Path) -> None:
    """A wheel's bot/migrations is used."""
    package = tmp_path / "site-packages" / "bot"
    package.mkdir(parents=True)
    scripts = _scripts_at(package / "migrations")
    assert find_migrations(package) == scripts


def test_source_tree_layout_is_found_beside_the_package(tmp_path: Path) -> None:
    """A checkout's top-level migrations/ is used when the package holds none."""
    package = tmp_path / "checkout" / "bot"
    package.mkdir(parents=True)
    scripts = _scripts_at(tmp_path / "checkout" / "migrations")
    assert find_migrations(package) == scripts


def test_the_installed_copy_wins_over_a_directory_beside_it(tmp_path: Path) -> None:
    """With both present (a wheel installed next to an unrelated migrations/), the package's own
    copy is used."""
    package = tmp_path / "bot"
    inside = _scripts_at(package / "migrations")
    _scripts_at(tmp_path / "migrations")
    assert find_migrations(package) == inside


def test_a_directory_without_env_py_does_not_count(tmp_path: Path) -> None:
    """An empty bot/migrations (a half-copied install) is passed over for the one beside it."""
    package = tmp_path / "bot"
    (package / "migrations").mkdir(parents=True)
    scripts = _scripts_at(tmp_path / "migrations")
    assert find_migrations(package) == scripts


def test_missing_scripts_name_every_place_looked(tmp_path: Path) -> None:
    """Neither place holding env.py raises MigrationError naming both paths and changes nothing."""
    package = tmp_path / "bot"
    package.mkdir()
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(MigrationError) as raised:
        find_migrations(package)
    assert str(package / "migrations") in str(raised.value)
    assert str(tmp_path / "migrations") in str(raised.value)
    assert sorted(tmp_path.rglob("*")) == before


def test_this_install_finds_the_checkouts_scripts() -> None:
    """The editable install the tests run from finds the repository's migrations/ (a wheel's
    layout is covered by test_wheel)."""
    checkout = Path(__file__).resolve().parents[2]
    assert checkout / "migrations" == MIGRATIONS_DIR
