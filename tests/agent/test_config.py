"""Tests for the agent's settings."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bot.agent import config as module
from bot.agent.config import AgentSettings, agent_settings_from_config, load_agent_settings
from bot.errors import ConfigError
from bot.settings import Secret

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "kimi-ops.example.toml"
TOKEN_ENV = {"KIMI_AGENT_TOKEN": "s3cret-token"}


def _settings(agent: dict[str, object], environ: dict[str, str] | None = None) -> AgentSettings:
    return agent_settings_from_config({"agent": agent}, TOKEN_ENV if environ is None else environ)


def test_example_file_loads_with_documented_defaults() -> None:
    """The shipped example config loads and carries the documented defaults."""
    settings = load_agent_settings(EXAMPLE, TOKEN_ENV)
    assert settings.listen == "127.0.0.1:7300"
    assert settings.backend == "process"
    assert settings.headroom_gb == 40
    assert settings.stop_grace_s == 60
    assert settings.gpu_free_timeout_s == 120
    assert [token.secret.reveal() for token in settings.tokens] == ["s3cret-token"]


def test_every_key_is_documented_in_the_example() -> None:
    """Each key the agent accepts appears (set or commented) in the example's [agent] section."""
    text = EXAMPLE.read_text()
    start = text.index("[agent]")
    section = text[start : text.index("[agent.env]")]
    for key in module._KNOWN_KEYS:
        if key == "env":
            continue
        assert f"{key} = " in section, key


def test_token_is_read_from_the_named_variable_and_never_shown() -> None:
    """The token comes from the variable token_env names and stays out of repr."""
    settings = _settings({"token_env": "MY_TOKEN", "command": ["srv"]}, {"MY_TOKEN": "abc123"})
    assert [token.secret for token in settings.tokens] == [Secret("abc123")]
    assert "abc123" not in repr(settings)


def test_missing_token_is_a_config_error_naming_the_variable() -> None:
    """Without the token variable set, loading fails and names the variable."""
    with pytest.raises(ConfigError, match="KIMI_AGENT_TOKEN"):
        _settings({"command": ["srv"]}, {})


def test_unknown_key_is_rejected() -> None:
    """A misspelt key fails with its name instead of being ignored."""
    with pytest.raises(ConfigError, match="stop_grace"):
        _settings({"command": ["srv"], "stop_grace": 5})


def test_process_backend_requires_a_command() -> None:
    """The process backend cannot run without the launch argv."""
    with pytest.raises(ConfigError, match="command is required"):
        _settings({"backend": "process"})


def test_systemd_backend_without_command_is_accepted() -> None:
    """With systemd the unit's ExecStart is the command, so none is needed in the file."""
    settings = _settings({"backend": "systemd", "unit": "sglang.service"})
    assert settings.command == ()
    assert settings.unit == "sglang.service"


@pytest.mark.parametrize("listen", ["7300", "host:", ":80", "h:99999", "h:abc"])
def test_bad_listen_is_rejected(listen: str) -> None:
    """A listen value that is not HOST:PORT fails with the value shown."""
    with pytest.raises(ConfigError, match="listen"):
        _settings({"command": ["srv"], "listen": listen})


def test_listen_port_zero_is_allowed() -> None:
    """Port 0 (pick a free port) is accepted for tests and the demo."""
    settings = _settings({"command": ["srv"], "listen": "127.0.0.1:0"})
    assert (settings.listen_host, settings.listen_port) == ("127.0.0.1", 0)


def test_env_table_must_hold_strings() -> None:
    """A non-string value in [agent.env] is refused with the key named."""
    with pytest.raises(ConfigError, match=r"env\.CUDA_VISIBLE_DEVICES"):
        _settings({"command": ["srv"], "env": {"CUDA_VISIBLE_DEVICES": 0}})


def test_sim_profile_and_state_default_from_the_server_env() -> None:
    """The sim profile and state dir follow the server's env table when not set directly."""
    settings = _settings(
        {
            "command": ["srv"],
            "probe": "sim",
            "env": {"KIMI_SIM_PROFILE": "tiny", "KIMI_SIM_STATE_DIR": "/tmp/s"},
        }
    )
    assert settings.sim_profile == "tiny"
    assert settings.sim_state_dir == Path("/tmp/s")


def test_non_positive_timeouts_are_rejected() -> None:
    """A zero or negative duration is refused with the key named."""
    with pytest.raises(ConfigError, match="poll_interval_s"):
        _settings({"command": ["srv"], "poll_interval_s": 0})


def test_bad_backend_choice_lists_the_options() -> None:
    """An unknown backend names both valid choices."""
    with pytest.raises(ConfigError, match="process, systemd"):
        _settings({"command": ["srv"], "backend": "docker"})


def test_log_file_defaults_inside_state_dir(tmp_path: Path) -> None:
    """Without log_file, the server log goes to state_dir/server.log."""
    settings = _settings({"command": ["srv"], "state_dir": str(tmp_path)})
    assert settings.log_file == tmp_path / "server.log"


def test_example_parses_as_toml() -> None:
    """The example file is valid TOML (a syntax slip would break every part's loader)."""
    tomllib.loads(EXAMPLE.read_text())


def test_router_url_defaults_to_none_and_a_bad_one_is_refused_by_name() -> None:
    """[agent] router_url is read without a trailing slash; unset it is None (the agent then
    reports server_url); a value that is not an http(s) URL is refused naming the key."""
    assert _settings({"command": ["srv"]}).router_url is None
    read = _settings({"command": ["srv"], "router_url": "http://10.0.0.11:30000/"})
    assert read.router_url == "http://10.0.0.11:30000"
    with pytest.raises(ConfigError, match=r"\[agent\] router_url '10.0.0.11:30000' is not an"):
        _settings({"command": ["srv"], "router_url": "10.0.0.11:30000"})


def test_admin_api_key_is_read_from_the_named_variable_and_never_shown() -> None:
    """admin_api_key_env names the variable; the key is a Secret that no repr shows, and a
    named but unset variable is a ConfigError naming it."""
    settings = _settings(
        {"command": ["sglang"], "admin_api_key_env": "SGL_ADMIN"},
        dict(TOKEN_ENV, SGL_ADMIN="adm1n-key"),
    )
    assert settings.admin_api_key == Secret("adm1n-key")
    assert "adm1n-key" not in repr(settings)
    assert _settings({"command": ["sglang"]}).admin_api_key is None
    with pytest.raises(ConfigError, match="SGL_ADMIN"):
        _settings({"command": ["sglang"], "admin_api_key_env": "SGL_ADMIN"})
