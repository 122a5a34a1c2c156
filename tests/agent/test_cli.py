"""Tests for ``kimi-ops agent``: the real command in a subprocess, over real HTTP.

The agent's config uses the process backend with the simulator's command and ``probe = "sim"``;
no server is started here (the agent only starts one for an operation).
"""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from bot.agent.config import load_agent_settings
from bot.agent.service import make_control
from tests.agent._api_helpers import (
    SMALL,
    TOKEN,
    TOKEN_ENV,
    agent_env,
    auth,
    run_agent,
    write_config,
)
from tests.agent.conftest import PYTHON

# Real subprocesses or a real server with simulated timings: not in the fast loop.
pytestmark = pytest.mark.slow


def _state_dir(config: Path) -> Path:
    return load_agent_settings(config, {TOKEN_ENV: TOKEN}).state_dir


def test_agent_serves_on_a_free_port_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """Port 0 gets a free port, logged and written to agent.addr; SIGTERM exits 0; the token
    never appears in the log."""
    config = write_config(tmp_path, profile=SMALL)
    state_dir = _state_dir(config)
    with run_agent(tmp_path, ["--config", str(config)], agent_env(), state_dir) as agent:
        assert agent.url.startswith("http://127.0.0.1:")
        assert not agent.url.endswith(":0")
        assert f"listening on {agent.url}" in agent.stderr()
        assert httpx.get(f"{agent.url}/healthz", timeout=10).status_code == 200
        status = httpx.get(f"{agent.url}/v1/status", headers=auth(), timeout=10)
        assert status.status_code == 200
        assert status.json()["host"]["name"] == "kimi-test"
        assert httpx.get(f"{agent.url}/v1/status", timeout=10).status_code == 401
        assert agent.stop(signal.SIGTERM) == 0
        log = agent.stderr()
    assert "SIGTERM received" in log
    assert "kimi-ops agent: stopped" in log
    assert "Traceback" not in log
    assert TOKEN not in log
    assert not (state_dir / "agent.addr").exists()


def test_agent_reads_the_config_from_the_environment_and_stops_on_sigint(
    tmp_path: Path,
) -> None:
    """Without --config, KIMI_OPS_CONFIG names the file; SIGINT also exits 0."""
    config = write_config(tmp_path, profile=SMALL)
    env = agent_env(KIMI_OPS_CONFIG=str(config))
    with run_agent(tmp_path, [], env, _state_dir(config)) as agent:
        assert httpx.get(f"{agent.url}/healthz", timeout=10).status_code == 200
        assert agent.stop(signal.SIGINT) == 0


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "bot", "agent", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_agent_without_a_config_exits_1_naming_both_ways_to_give_one(tmp_path: Path) -> None:
    """No --config and no KIMI_OPS_CONFIG: exit 1 with a message naming both."""
    result = _run([], agent_env())
    assert result.returncode == 1
    assert "--config" in result.stderr
    assert "KIMI_OPS_CONFIG" in result.stderr


def test_agent_without_its_token_exits_1_naming_the_variable(tmp_path: Path) -> None:
    """The token variable unset: exit 1 naming it, before anything listens."""
    config = write_config(tmp_path, profile=SMALL)
    env = agent_env()
    del env[TOKEN_ENV]
    result = _run(["--config", str(config)], env)
    assert result.returncode == 1
    assert TOKEN_ENV in result.stderr
    assert not (_state_dir(config) / "agent.addr").exists()


def test_agent_on_a_taken_port_exits_1_naming_it(tmp_path: Path) -> None:
    """A listen address already in use: exit 1 naming the address, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = write_config(tmp_path, profile=SMALL, listen=f"127.0.0.1:{port}")
        result = _run(["--config", str(config)], agent_env())
    assert result.returncode == 1
    assert f"127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_edited_command_is_warned_of_and_adopted_by_adopt_command(tmp_path: Path) -> None:
    """command.json recorded from a config at --hicache-ratio 2, then the config edited to
    ratio 3: the agent warns at start and in status naming both flags and the adopt-command
    subcommand (failed before the fix: the edit was ignored without a word); ``kimi-ops agent
    adopt-command`` writes the config's command (the recorded one kept as the previous), and a
    second run has nothing to adopt."""
    recorded = write_config(tmp_path, profile=SMALL)
    settings = load_agent_settings(recorded, {TOKEN_ENV: TOKEN})
    make_control(settings).read_command()  # recorded from the config as it was
    edited_argv = [*settings.command]
    edited_argv[edited_argv.index("--hicache-ratio") + 1] = "3"
    config = write_config(
        tmp_path, profile=SMALL, command=edited_argv, server_url=settings.server_url
    )
    state_dir = _state_dir(config)
    with run_agent(tmp_path, ["--config", str(config)], agent_env(), state_dir) as agent:
        problems = httpx.get(f"{agent.url}/v1/status", headers=auth(), timeout=10).json()[
            "problems"
        ]
        assert agent.stop(signal.SIGTERM) == 0
        log = agent.stderr()
    (drift,) = [p for p in problems if "[agent] command was edited" in p]
    assert "the config has --hicache-ratio 3 where it had --hicache-ratio 2" in drift
    assert "kimi-ops agent adopt-command --config FILE" in drift
    assert "[agent] command was edited" in log
    done = subprocess.run(
        [PYTHON, "-m", "bot", "agent", "adopt-command", "--config", str(config)],
        env=agent_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "command.json now holds [agent] command" in done.stdout
    control = make_control(load_agent_settings(config, {TOKEN_ENV: TOKEN}))
    assert control.read_command() == edited_argv
    assert control.previous_command() == list(settings.command)
    again = subprocess.run(
        [PYTHON, "-m", "bot", "agent", "--config", str(config), "adopt-command"],
        env=agent_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "nothing to adopt" in again.stdout
    assert not make_control(load_agent_settings(config, {TOKEN_ENV: TOKEN})).command_edit()


def test_a_second_agent_on_the_same_state_dir_refuses_naming_the_holder(tmp_path: Path) -> None:
    """A second agent on a state directory a live agent holds exits 2 with one line naming the
    holder's pid, and leaves the first agent's agent.addr in place; once the first stops, an
    agent starts there again. Failed before the fix: both agents served and the one that exited
    deleted the other's agent.addr."""
    config = write_config(tmp_path, profile=SMALL)
    state_dir = _state_dir(config)
    with run_agent(tmp_path, ["--config", str(config)], agent_env(), state_dir) as first:
        addr_before = (state_dir / "agent.addr").read_text(encoding="utf-8")
        second = _run(["--config", str(config)], agent_env())
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert f"pid {first.process.pid}" in lines[0]
        assert str(state_dir) in lines[0]
        assert (state_dir / "agent.addr").read_text(encoding="utf-8") == addr_before
        status = httpx.get(f"{first.url}/v1/status", headers=auth(), timeout=10)
        assert status.status_code == 200
        assert first.stop(signal.SIGTERM) == 0
    assert not (state_dir / "agent.addr").exists()
    with run_agent(tmp_path, ["--config", str(config)], agent_env(), state_dir) as third:
        assert httpx.get(f"{third.url}/healthz", timeout=10).status_code == 200
        assert third.stop(signal.SIGTERM) == 0


def test_an_agent_leaves_an_agent_addr_it_did_not_write(tmp_path: Path) -> None:
    """An agent whose agent.addr was replaced (another agent's URL) leaves it on exit."""
    config = write_config(tmp_path, profile=SMALL)
    state_dir = _state_dir(config)
    with run_agent(tmp_path, ["--config", str(config)], agent_env(), state_dir) as agent:
        (state_dir / "agent.addr").write_text("http://127.0.0.1:1\n", encoding="utf-8")
        assert agent.stop(signal.SIGTERM) == 0
    assert (state_dir / "agent.addr").read_text(encoding="utf-8") == "http://127.0.0.1:1\n"
