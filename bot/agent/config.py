"""The agent's settings: the ``[agent]`` section of the config file plus its token.

Every key is documented in ``deploy/kimi-ops.example.toml``. A wrong key or type fails at start
with the section, the key and what was expected (``bot.settings.Section``)::

    [agent]
    backend = "process"
    command = ["python", "-m", "sglang.launch_server", "--model-path", "/models/k2", "--tp", "8"]
    state_dir = "/var/lib/kimi-ops/agent"

gives ``AgentSettings(backend="process", command=("python", ...), listen_port=7300, ...)``.

Transport: ``tls_cert`` and ``tls_key`` (PEM paths, both or neither) make the agent serve HTTPS;
``allow_plaintext = true`` lets it listen on a non-loopback address without them (see
:mod:`bot.agent.tls` for the rule and ``docs/security.md`` for why). The token variable may hold
several tokens, named and read-only ones among them (:mod:`bot.agent.tokens`).
"""

from __future__ import annotations

import re
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from bot.agent.tokens import TokenSet, parse_tokens
from bot.errors import ConfigError
from bot.settings import Secret, Section, load_config, secret_from_env

__all__ = [
    "ADOPT_COMMAND",
    "DEFAULT_GUARD_FLOOR_GB",
    "DEFAULT_HEALTH_TIMEOUT_S",
    "DEFAULT_SIM_PROFILE",
    "DEFAULT_STATUS_TIMEOUT_S",
    "AgentSettings",
    "GuardSettings",
    "HttpLimits",
    "agent_settings_from_config",
    "command_drift",
    "load_agent_settings",
]

DEFAULT_SIM_PROFILE = "kimi-k25-8gpu"
#: Above SGLang's own 20 s (``/health`` answers 503 only after its generation timed out).
DEFAULT_HEALTH_TIMEOUT_S = 30.0
#: Three reads of the server per status (health, server_info, metrics) stay under 15 s.
DEFAULT_STATUS_TIMEOUT_S = 4.0
#: SGLang's own host reserve, 10 GiB, in GB (1e9): the RAM a start must never eat into.
DEFAULT_GUARD_FLOOR_GB = 10 * 1024**3 / 1e9

_KNOWN_KEYS = (
    "listen",
    "token_env",
    "backend",
    "command",
    "server_url",
    "router_url",
    "state_dir",
    "log_file",
    "unit",
    "unit_dir",
    "container",
    "docker_host",
    "systemctl",
    "journalctl",
    "headroom_gb",
    "probe",
    "sim_profile",
    "sim_state_dir",
    "stop_grace_s",
    "gpu_free_timeout_s",
    "stall_after_s",
    "hard_ceiling_s",
    "poll_interval_s",
    "health_timeout_s",
    "health_grace_s",
    "status_timeout_s",
    "guard",
    "guard_interval_s",
    "guard_floor_gb",
    "host_name",
    "env",
    "tls_cert",
    "tls_key",
    "allow_plaintext",
    "header_timeout_s",
    "max_connections",
    "max_connections_per_client",
    "max_body_bytes",
    "max_polls_per_token",
    "admin_api_key_env",
    "live_idle_timeout_s",
)


@dataclass(frozen=True)
class GuardSettings:
    """The startup guard: on or off, how often it samples host RAM, and the RAM floor."""

    enabled: bool = True
    interval_s: float = 0.5
    floor_gb: float = DEFAULT_GUARD_FLOOR_GB

    @property
    def floor_bytes(self) -> float:
        return self.floor_gb * 1e9


@dataclass(frozen=True)
class HttpLimits:
    """What the API server lets clients hold (``docs/security.md``): the seconds a connection
    has to send a request's headers, connections in all and per client address, a request body's
    bytes, and long-polls waiting at once per token."""

    header_timeout_s: float = 10.0
    max_connections: int = 512
    max_connections_per_client: int = 64
    max_body_bytes: int = 64 * 1024
    max_polls_per_token: int = 16


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent is configured with. Paths are as given (relative = to the cwd)."""

    tokens: TokenSet = field(repr=False)
    listen_host: str = "127.0.0.1"
    listen_port: int = 7300
    token_env: str = "KIMI_AGENT_TOKEN"
    backend: str = "process"
    command: tuple[str, ...] = ()
    server_url: str = "http://127.0.0.1:30000"
    #: The server's URL as SGLang's router reaches it (a fleet's replica); None: ``server_url``.
    router_url: str | None = None
    state_dir: Path = Path("/var/lib/kimi-ops/agent")
    log_file: Path = Path("/var/lib/kimi-ops/agent/server.log")
    unit: str = "sglang-kimi.service"
    unit_dir: Path = Path("/etc/systemd/system")
    systemctl: str = "systemctl"
    journalctl: str = "journalctl"
    #: The server's container (``backend = "docker"``) and the Docker daemon's address.
    container: str = ""
    docker_host: str = "unix:///var/run/docker.sock"
    headroom_gb: float = 40.0
    probe: str = "host"
    sim_profile: str = DEFAULT_SIM_PROFILE
    sim_state_dir: Path | None = None
    stop_grace_s: float = 60.0
    gpu_free_timeout_s: float = 120.0
    stall_after_s: float = 300.0
    hard_ceiling_s: float = 3600.0
    poll_interval_s: float = 1.0
    #: How long the engine waits for one ``/health`` answer: SGLang answers 503 only after its
    #: own 20 s health generation timed out, and a loaded server (or a proxy) is slower still.
    health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S
    #: How long ``/health`` may keep failing after HTTP came up before a start counts as failed.
    health_grace_s: float = 300.0
    #: How long ``/v1/status`` waits for each of the server's endpoints, so status answers in
    #: bounded time (the bot gives up on it at 15 s) whatever the server does.
    status_timeout_s: float = DEFAULT_STATUS_TIMEOUT_S
    guard: GuardSettings = field(default_factory=GuardSettings)
    host_name: str = "localhost"
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    tls_cert: Path | None = None
    tls_key: Path | None = None
    allow_plaintext: bool = False
    http: HttpLimits = field(default_factory=HttpLimits)
    #: The variable holding the SGLang server's ``--admin-api-key`` (HiCache's runtime API).
    admin_api_key_env: str | None = None
    admin_api_key: Secret | None = field(default=None, repr=False)
    #: How long a live change waits for the server to be idle before it gives up.
    live_idle_timeout_s: float = 600.0

    @property
    def listen(self) -> str:
        """``host:port`` as written in the config (port 0 = the OS picks a free one)."""
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def tls(self) -> bool:
        """Whether the agent serves HTTPS (both PEM paths are set)."""
        return self.tls_cert is not None and self.tls_key is not None


#: The subcommand that makes an edited ``[agent] command`` the one the server is started with.
ADOPT_COMMAND = "kimi-ops agent adopt-command --config FILE"


def command_drift(configured: Sequence[str], taken_from: Sequence[str]) -> str | None:
    """The warning when ``[agent] command`` (``configured``) was edited after the recorded
    command (the process backend's ``command.json``) was taken from it (``taken_from``); None
    when it was not. The agent's own changes (a resize) never count: only the config's edit.
    Only the differing flags are named::

        command_drift([..., "--tp", "8"], [..., "--tp", "4"])
        -> "[agent] command was edited after the agent recorded the server's command from it
            (command.json): the config has --tp 8 where it had --tp 4. ..."
    """
    if not configured or list(configured) == list(taken_from):
        return None
    mine, theirs = _flags(configured), _flags(taken_from)
    only_config = [word for item in mine if item not in theirs for word in item]
    only_before = [word for item in theirs if item not in mine for word in item]
    if not only_config and not only_before:  # the same flags in another order
        only_config, only_before = list(configured), list(taken_from)
    return (
        "[agent] command was edited after the agent recorded the server's command from it "
        f"(command.json): the config has {shlex.join(only_config) or '(nothing more)'} where it "
        f"had {shlex.join(only_before) or '(nothing more)'}. The edit is not used until it is "
        f"adopted: `{ADOPT_COMMAND}`, then restart the server"
    )


def _flags(argv: Sequence[str]) -> list[tuple[str, ...]]:
    """``argv`` as its program part and each flag with its values: ("--tp", "8")."""
    items: list[tuple[str, ...]] = []
    current: list[str] = []
    for word in argv:
        if word.startswith("--") and current:
            items.append(tuple(current))
            current = []
        current.append(word)
    if current:
        items.append(tuple(current))
    return items


def _router_url(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"[agent] router_url {value!r} is not an http(s) URL; give the server's URL as the "
            "router reaches it, e.g. http://10.0.0.11:30000"
        )
    return value.rstrip("/")


def load_agent_settings(path: Path, environ: Mapping[str, str]) -> AgentSettings:
    """Read ``[agent]`` from the TOML file at ``path`` and the token from ``environ``."""
    return agent_settings_from_config(load_config(path), environ)


def agent_settings_from_config(
    config: Mapping[str, Any], environ: Mapping[str, str]
) -> AgentSettings:
    """Build the settings from an already parsed config mapping (the whole file)."""
    section = Section(config, "agent", _KNOWN_KEYS)
    listen_host, listen_port = _parse_listen(section.text("listen", "127.0.0.1:7300"))
    token_env = section.text("token_env", "KIMI_AGENT_TOKEN")
    tokens = parse_tokens(
        secret_from_env(
            environ, token_env, "the token the bot sends to this agent ([agent] token_env)"
        ).reveal(),
        token_env,
    )
    tls_cert, tls_key = _tls_paths(section)
    backend = section.choice("backend", ("process", "systemd", "docker"), "process")
    command = tuple(section.text_list("command", []))
    if backend == "process" and not command:
        raise ConfigError(
            '[agent] command is required with backend = "process": the server\'s launch argv, '
            'e.g. ["python", "-m", "sglang.launch_server", "--model-path", "/models/m"]'
        )
    container = _container(section, backend)
    env = _parse_env(config.get("agent", {}).get("env", {}))
    state_dir = Path(section.text("state_dir", "/var/lib/kimi-ops/agent"))
    log_file = Path(section.text("log_file", str(state_dir / "server.log")))
    sim_state = section.optional_text("sim_state_dir") or env.get("KIMI_SIM_STATE_DIR")
    admin_env = section.optional_text("admin_api_key_env")
    admin_key = (
        None
        if admin_env is None
        else secret_from_env(
            environ,
            admin_env,
            "the SGLang server's --admin-api-key ([agent] admin_api_key_env)",
        )
    )
    return AgentSettings(
        tokens=tokens,
        listen_host=listen_host,
        listen_port=listen_port,
        token_env=token_env,
        backend=backend,
        command=command,
        server_url=section.text("server_url", "http://127.0.0.1:30000").rstrip("/"),
        router_url=_router_url(section.optional_text("router_url")),
        state_dir=state_dir,
        log_file=log_file,
        unit=section.text("unit", "sglang-kimi.service"),
        unit_dir=Path(section.text("unit_dir", "/etc/systemd/system")),
        systemctl=section.text("systemctl", "systemctl"),
        journalctl=section.text("journalctl", "journalctl"),
        container=container,
        docker_host=section.text(
            "docker_host", environ.get("DOCKER_HOST", "").strip() or "unix:///var/run/docker.sock"
        ),
        headroom_gb=section.number("headroom_gb", 40.0, minimum=0.0),
        probe=section.choice("probe", ("host", "sim"), "host"),
        sim_profile=section.text("sim_profile", env.get("KIMI_SIM_PROFILE", DEFAULT_SIM_PROFILE)),
        sim_state_dir=Path(sim_state) if sim_state else None,
        stop_grace_s=_positive(section, "stop_grace_s", 60.0),
        gpu_free_timeout_s=_positive(section, "gpu_free_timeout_s", 120.0),
        stall_after_s=_positive(section, "stall_after_s", 300.0),
        hard_ceiling_s=_positive(section, "hard_ceiling_s", 3600.0),
        poll_interval_s=_positive(section, "poll_interval_s", 1.0),
        health_timeout_s=_positive(section, "health_timeout_s", DEFAULT_HEALTH_TIMEOUT_S),
        health_grace_s=_positive(section, "health_grace_s", 300.0),
        status_timeout_s=_positive(section, "status_timeout_s", DEFAULT_STATUS_TIMEOUT_S),
        guard=GuardSettings(
            enabled=section.flag("guard", True),
            interval_s=_positive(section, "guard_interval_s", 0.5),
            floor_gb=section.number("guard_floor_gb", DEFAULT_GUARD_FLOOR_GB, minimum=0.0),
        ),
        host_name=section.text("host_name", socket.gethostname()),
        env=MappingProxyType(env),
        tls_cert=tls_cert,
        tls_key=tls_key,
        allow_plaintext=section.flag("allow_plaintext", False),
        http=_http_limits(section),
        admin_api_key_env=admin_env,
        admin_api_key=admin_key,
        live_idle_timeout_s=_positive(section, "live_idle_timeout_s", 600.0),
    )


def _http_limits(section: Section) -> HttpLimits:
    default = HttpLimits()
    return HttpLimits(
        header_timeout_s=_positive(section, "header_timeout_s", default.header_timeout_s),
        max_connections=section.integer("max_connections", default.max_connections, minimum=1),
        max_connections_per_client=section.integer(
            "max_connections_per_client", default.max_connections_per_client, minimum=1
        ),
        max_body_bytes=section.integer("max_body_bytes", default.max_body_bytes, minimum=1024),
        max_polls_per_token=section.integer(
            "max_polls_per_token", default.max_polls_per_token, minimum=1
        ),
    )


_CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


def _container(section: Section, backend: str) -> str:
    name = section.text("container", "")
    if backend == "docker" and not name:
        raise ConfigError(
            '[agent] container is required with backend = "docker": the name of the server\'s '
            'container, e.g. container = "sglang" (docker ps -a lists them)'
        )
    if name and not _CONTAINER_NAME.fullmatch(name):
        raise ConfigError(
            f"[agent] container {name!r} is not a Docker container name (letters, digits and "
            "_.- after a letter or digit)"
        )
    if name.endswith((".previous", ".next")):
        raise ConfigError(
            f"[agent] container {name!r} ends in .previous or .next: kimi-ops keeps the "
            "replaced and the new container under those names; name the server's container"
        )
    return name


def _tls_paths(section: Section) -> tuple[Path | None, Path | None]:
    cert, key = section.optional_text("tls_cert"), section.optional_text("tls_key")
    if (cert is None) != (key is None):
        given, missing = ("tls_cert", "tls_key") if key is None else ("tls_key", "tls_cert")
        raise ConfigError(
            f"[agent] {given} is set but {missing} is not; give both PEM paths "
            "(`kimi-ops agent gen-cert --out DIR` writes a pair)"
        )
    for key_name, value in (("tls_cert", cert), ("tls_key", key)):
        if value is not None and not value.strip():
            raise ConfigError(f"[agent] {key_name} is empty; give the PEM file's path")
    return (Path(cert) if cert else None), (Path(key) if key else None)


def _positive(section: Section, key: str, default: float) -> float:
    value = section.number(key, default)
    if value <= 0:
        raise ConfigError(f"[agent] {key} must be a positive number of seconds, not {value:g}")
    return value


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(
            f"[agent] listen is {value!r}; expected HOST:PORT such as '127.0.0.1:7300' "
            "(port 0 picks a free one)"
        )
    return host.strip("[]"), int(port_text)


def _parse_env(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f'[agent] env must be a table of NAME = "value", not {raw!r}')
    env: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(value, str):
            raise ConfigError(
                f'[agent] env.{name} must be a string (quote numbers: "{value}"), not {value!r}'
            )
        env[str(name)] = value
    return env
