"""Which database a command uses: --url, else [store] url of the config file, else ./kimi-ops.db."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import ConfigError, InputError
from bot.store import DEFAULT_URL, StoreSettings
from bot.store.config import resolve_settings

PG_CONFIG = '[store]\nurl = "postgresql+pg8000://ops@db/kimi"\npassword_env = "KIMI_DB_PASSWORD"\n'


def test_default_is_a_sqlite_file_in_the_working_directory() -> None:
    """No option and no config file: sqlite:///kimi-ops.db with a 30 s busy timeout."""
    assert resolve_settings(None, None, {}) == StoreSettings("sqlite:///kimi-ops.db", 30.0)
    assert DEFAULT_URL == "sqlite:///kimi-ops.db"


def test_config_file_from_the_environment_and_url_option_wins(tmp_path: Path) -> None:
    """KIMI_OPS_CONFIG names the file; --url overrides its url but keeps its other settings."""
    config = tmp_path / "kimi-ops.toml"
    config.write_text('[store]\nurl = "postgresql+pg8000://ops@db/kimi"\nbusy_timeout_s = 5\n')
    env = {"KIMI_OPS_CONFIG": str(config)}
    assert resolve_settings(None, None, env) == StoreSettings("postgresql+pg8000://ops@db/kimi", 5)
    assert resolve_settings("sqlite:///x.db", None, env) == StoreSettings("sqlite:///x.db", 5)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[store]\nurl = "sqlite:///a.db"\npath = "x"\n', "unknown key 'path' in \\[store\\]"),
        ("[store]\nurl = 3\n", "\\[store\\] url must be a string"),
        ("[store]\nbusy_timeout_s = 0\n", "busy_timeout_s must be at least"),
    ],
)
def test_bad_store_section_is_a_config_error(tmp_path: Path, body: str, message: str) -> None:
    """A wrong key or type in [store] names the key."""
    config = tmp_path / "kimi-ops.toml"
    config.write_text(body)
    with pytest.raises(ConfigError, match=message):
        resolve_settings(None, str(config), {})


def test_bad_url_is_an_input_error(tmp_path: Path) -> None:
    """A --url that is not a URL is refused with the value named."""
    with pytest.raises(InputError, match="'nonsense' is not a SQLAlchemy URL"):
        resolve_settings("nonsense", None, {})


def test_password_comes_from_the_named_variable_and_is_never_shown(tmp_path: Path) -> None:
    """password_env supplies the password to the engine URL only; repr and url hide it."""
    config = tmp_path / "kimi-ops.toml"
    config.write_text(PG_CONFIG)
    settings = resolve_settings(None, str(config), {"KIMI_DB_PASSWORD": "hunter2-secret"})
    assert settings.engine_url().password == "hunter2-secret"
    assert "hunter2" not in repr(settings)
    assert "hunter2" not in settings.url


def test_missing_password_variable_or_password_in_url_is_a_config_error(tmp_path: Path) -> None:
    """An unset password variable, or a password written into the URL, is refused by name."""
    config = tmp_path / "kimi-ops.toml"
    config.write_text(PG_CONFIG)
    with pytest.raises(ConfigError, match="KIMI_DB_PASSWORD is not set"):
        resolve_settings(None, str(config), {})
    config.write_text('[store]\nurl = "postgresql+pg8000://ops:pw@db/kimi"\n')
    with pytest.raises(ConfigError, match="url holds a password"):
        resolve_settings(None, str(config), {})
