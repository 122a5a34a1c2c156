"""``kimi-ops chat`` as a subprocess without an agent: the prompt, a silent host, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.chat.policy import Actor
from bot.terminal.cli import acting_as
from tests.chat.conftest import free_port

pytestmark = pytest.mark.slow  # each test runs kimi-ops chat as a subprocess

TOKEN_ENV = "KIMI_AGENT_TOKEN"


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "chat.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path / "kimi-ops.db"}"\n'
        f'[hosts.kimi-01]\nurl = "http://127.0.0.1:{free_port()}"\ntoken_env = "{TOKEN_ENV}"\n',
        encoding="utf-8",
    )
    return config


def _chat(
    tmp_path: Path, *args: str, stdin: str = "", token: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "USER": "ana"}
    if token:
        env[TOKEN_ENV] = "t0ken"
    return subprocess.run(
        [sys.executable, "-m", "bot", "chat", "--config", str(_config(tmp_path)), *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_prompt_reads_commands_until_quit(tmp_path: Path) -> None:
    """Without a command: 'kimi> ' prompts, each line is answered (a silent host is listed with
    since when), 'quit' exits 0 and the history file is written."""
    done = _chat(tmp_path, stdin="help\nstatus\nresize ratio nan\nquit\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("kimi> ") == 4
    assert "resize ratio 4" in done.stdout  # help's examples
    assert "kimi-01: agent unreachable since" in done.stdout
    assert "ratio 'nan' is not a finite number" in done.stdout
    assert (tmp_path / ".kimi-ops-chat-history").is_file()


def test_one_command_exits_with_its_code(tmp_path: Path) -> None:
    """A usage error exits 2; a command whose agent does not answer exits 1 naming the host."""
    assert _chat(tmp_path, "resize", "size", "0").returncode == 2
    unreachable = _chat(tmp_path, "resize", "ratio", "4")
    assert unreachable.returncode == 1
    assert "agent kimi-01 cannot be reached" in unreachable.stdout


def test_bad_settings_and_users_are_refused_before_anything_runs(tmp_path: Path) -> None:
    """A user name with spaces exits 2; a missing token variable exits 1 naming it; no store
    file is left behind by the refused user."""
    bad_user = _chat(tmp_path, "--as", "ana smith", "status")
    assert bad_user.returncode == 2
    assert "is not a usable name" in bad_user.stderr
    assert not (tmp_path / "kimi-ops.db").exists()
    no_token = _chat(tmp_path, "status", token=False)
    assert no_token.returncode == 1
    assert f"{TOKEN_ENV} is not set" in no_token.stderr


def test_as_runs_one_command_as_another_person_or_switches() -> None:
    """At the prompt, 'as ben resize ratio 4' runs that command as ben, 'as ben' alone switches
    to ben (no command), and any other line runs as the prompt's person."""
    ana = Actor("ana")
    assert acting_as("as ben resize ratio 4", ana) == (Actor("ben"), "resize ratio 4")
    assert acting_as("as ben", ana) == (Actor("ben"), None)
    assert acting_as("  status  ", ana) == (ana, "status")
    assert acting_as("assess", ana) == (ana, "assess")
