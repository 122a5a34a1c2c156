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
    """An unknown backend names the valid choices."""
    with pytest.raises(ConfigError, match="process, systemd, docker"):
        _settings({"command": ["srv"], "backend": "podman"})


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


def test_health_timeouts_are_settings_with_defaults_that_fit_a_loaded_server() -> None:
    """health_timeout_s defaults above SGLang's own 20 s, status_timeout_s keeps status's
    three reads under the bot's 15 s, health_grace_s defaults to 300 s; each can be set, and a
    non-positive value is refused naming the key (failed before the fix: no such settings, a
    7 s /health was "no answer" at the client's fixed 5 s)."""
    base = {"command": ["python3", "-m", "sglang.launch_server"]}
    env = {"KIMI_AGENT_TOKEN": "t"}
    defaults = agent_settings_from_config({"agent": base}, env)
    assert defaults.health_timeout_s > 20
    assert 3 * defaults.status_timeout_s < 15
    assert defaults.health_grace_s == 300
    given = agent_settings_from_config(
        {"agent": {**base, "health_timeout_s": 45, "health_grace_s": 60, "status_timeout_s": 2}},
        env,
    )
    assert (given.health_timeout_s, given.health_grace_s, given.status_timeout_s) == (45, 60, 2)
    with pytest.raises(ConfigError, match="health_timeout_s must be a positive"):
        agent_settings_from_config({"agent": {**base, "health_timeout_s": 0}}, env)


def test_command_drift_names_only_the_edited_flags_and_the_fix() -> None:
    """An edited flag and an added one are named with their values against the command the
    record was taken from; the same command (or none configured) gives no warning."""
    before = ["python3", "-m", "sglang.launch_server", "--tp", "8", "--hicache-ratio", "2"]
    assert module.command_drift(before, before) is None
    assert module.command_drift([], before) is None
    edited = ["python3", "-m", "sglang.launch_server", "--tp", "8", "--hicache-ratio", "4",
              "--enable-metrics"]  # fmt: skip
    drift = module.command_drift(edited, before)
    assert drift is not None
    assert "the config has --hicache-ratio 4 --enable-metrics where it had --hicache-ratio 2." in (
        drift
    )
    assert "--tp" not in drift
    assert "kimi-ops agent adopt-command --config FILE" in drift


def test_http_limits_are_read_with_their_defaults() -> None:
    """The API's limits default to 10 s, 512 and 64 connections, 64 KB, 16 polls; each key
    sets its own."""
    base = {"backend": "systemd"}
    default = _settings(base).http
    assert (default.header_timeout_s, default.max_connections) == (10.0, 512)
    assert (default.max_connections_per_client, default.max_body_bytes) == (64, 65536)
    assert default.max_polls_per_token == 16
    given = _settings(
        {**base, "header_timeout_s": 3, "max_connections": 100, "max_connections_per_client": 9,
         "max_body_bytes": 4096, "max_polls_per_token": 2}
    ).http  # fmt: skip
    assert (given.header_timeout_s, given.max_connections) == (3.0, 100)
    assert (given.max_connections_per_client, given.max_body_bytes) == (9, 4096)
    assert given.max_polls_per_token == 2


@pytest.mark.parametrize(
    ("key", "value"),
    [("max_connections", 0), ("max_polls_per_token", -1), ("max_body_bytes", 10),
     ("header_timeout_s", 0)],
)  # fmt: skip
def test_a_limit_out_of_range_is_a_config_error_naming_the_key(key: str, value: int) -> None:
    """A zero or negative limit (or a body limit under 1 KB) fails at start naming the key."""
    with pytest.raises(ConfigError, match=key):
        _settings({"backend": "systemd", key: value})


def test_the_docker_backend_needs_the_container_name() -> None:
    """backend = "docker" without container fails naming the key and an example."""
    with pytest.raises(ConfigError, match=r'\[agent\] container is required.*container = "sglang"'):
        _settings({"backend": "docker"})


def test_the_docker_host_is_the_setting_else_docker_host_else_the_local_socket() -> None:
    """docker_host as set wins; unset, DOCKER_HOST from the environment; else Docker's socket."""
    agent = {"backend": "docker", "container": "sglang"}
    given = _settings({**agent, "docker_host": "tcp://10.0.0.5:2375"})
    assert (given.container, given.docker_host) == ("sglang", "tcp://10.0.0.5:2375")
    from_env = _settings(agent, {**TOKEN_ENV, "DOCKER_HOST": "unix:///run/podman/podman.sock"})
    assert from_env.docker_host == "unix:///run/podman/podman.sock"
    assert _settings(agent).docker_host == "unix:///var/run/docker.sock"


@pytest.mark.parametrize("name", ["sglang.previous", "sglang.next", "-sglang", "sg lang"])
def test_a_container_name_docker_cannot_have_or_kimi_ops_keeps_is_refused(name: str) -> None:
    """A name Docker refuses, or one of the names kept for the old and new containers, fails
    naming it."""
    with pytest.raises(ConfigError, match=f"container {name!r}"):
        _settings({"backend": "docker", "container": name})


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
