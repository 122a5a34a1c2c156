"""Settings: the TOML file, its typed sections, and secrets that never print."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import ConfigError
from bot.settings import Secret, Section, find_config_path, load_config, secret_from_env


def test_config_path_prefers_the_flag_over_the_environment() -> None:
    """--config wins over KIMI_OPS_CONFIG; with neither, the error names both."""
    assert find_config_path("a.toml", {"KIMI_OPS_CONFIG": "b.toml"}) == Path("a.toml")
    assert find_config_path(None, {"KIMI_OPS_CONFIG": "b.toml"}) == Path("b.toml")
    with pytest.raises(ConfigError, match="--config FILE or set KIMI_OPS_CONFIG"):
        find_config_path(None, {})


def test_missing_and_malformed_files_name_the_file(tmp_path: Path) -> None:
    """A missing file or bad TOML is a ConfigError naming the path."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent\nlisten = 1\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(bad)


def test_section_reads_typed_values_and_rejects_unknown_keys(tmp_path: Path) -> None:
    """Typed accessors return values and defaults; unknown keys and wrong types are named."""
    path = tmp_path / "k.toml"
    path.write_text('[agent]\nlisten = "127.0.0.1:0"\nheadroom_gb = 40\ncommand = ["a", "b"]\n')
    config = load_config(path)
    section = Section(config, "agent", ["listen", "headroom_gb", "command", "backend"])
    assert section.text("listen") == "127.0.0.1:0"
    assert section.number("headroom_gb") == 40.0
    assert section.text_list("command") == ["a", "b"]
    assert section.choice("backend", ["process", "systemd"], "process") == "process"
    with pytest.raises(ConfigError, match=r"\[agent\] listen must be an integer"):
        section.integer("listen")
    with pytest.raises(ConfigError, match="unknown key 'listen' in \\[agent\\]"):
        Section(config, "agent", ["headroom_gb", "command"])


def test_booleans_are_not_numbers(tmp_path: Path) -> None:
    """`headroom_gb = true` is refused rather than read as 1."""
    path = tmp_path / "k.toml"
    path.write_text("[agent]\nheadroom_gb = true\n")
    with pytest.raises(ConfigError, match="must be a number"):
        Section(load_config(path), "agent", ["headroom_gb"]).number("headroom_gb")


def test_secrets_come_from_the_environment_and_never_print() -> None:
    """A Secret hides its value in repr/str; a missing variable is named."""
    secret = secret_from_env({"KIMI_AGENT_TOKEN": "s3cr3t"}, "KIMI_AGENT_TOKEN", "the token")
    assert secret.reveal() == "s3cr3t"
    assert "s3cr3t" not in repr(secret)
    assert "s3cr3t" not in f"{secret} {[secret]}"
    assert secret == Secret("s3cr3t")
    with pytest.raises(ConfigError, match="KIMI_AGENT_TOKEN is not set"):
        secret_from_env({}, "KIMI_AGENT_TOKEN", "the token")


def test_an_unknown_section_is_named_with_the_known_ones(tmp_path: Path) -> None:
    """A misspelt table such as [stor] is an error naming it and the known sections, not a
    silent fallback to the defaults of the section it was meant to be."""
    path = tmp_path / "k.toml"
    path.write_text('[stor]\nurl = "sqlite:///x.db"\n')
    with pytest.raises(ConfigError, match=r"unknown section \[stor\].*\[store\]"):
        load_config(path)
    path.write_text('[store]\nurl = "sqlite:///x.db"\n')
    assert load_config(path) == {"store": {"url": "sqlite:///x.db"}}
