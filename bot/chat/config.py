"""The bot core's settings: ``[bot]``, ``[policy]`` and one ``[hosts.NAME]`` table per agent.

Every key is documented in ``deploy/kimi-ops.example.toml``::

    [bot]
    update_interval_s = 3             # at most one progress edit per operation this often
    [policy]
    appliers = ["U0123456789"]        # user ids who may apply, restart, roll back, schedule
    usergroups = []                   # or members of these user groups
    require_second_person = false     # the applier must not be the proposer
    proposal_ttl_minutes = 15
    [hosts.kimi-01]
    url = "http://127.0.0.1:7300"
    token_env = "KIMI_AGENT_TOKEN"    # the variable holding the agent's token, never the token
    default = true

Errors name the file, the table and the key. The agent's token is read from the environment only
when a client for that host is made (:meth:`ChatSettings.token_for`), so a command for one host
does not need every host's token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.chat._usage import VERBS
from bot.errors import ConfigError
from bot.settings import Secret, Section, secret_from_env

__all__ = [
    "DEFAULT_PROPOSAL_TTL_MINUTES",
    "DEFAULT_UPDATE_INTERVAL_S",
    "ChatSettings",
    "HostSettings",
    "PolicySettings",
    "load_chat_settings",
]

DEFAULT_UPDATE_INTERVAL_S = 3.0
DEFAULT_PROPOSAL_TTL_MINUTES = 15
DEFAULT_TOKEN_ENV = "KIMI_AGENT_TOKEN"
# Slack's chat.update is Tier 3 (about 50 a minute per workspace): one edit a second is the floor.
_MIN_UPDATE_INTERVAL_S = 1.0
_MAX_TTL_MINUTES = 24 * 60
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", re.ASCII)
# A host is the last word of a command: it must not read as a number or a grammar word.
_RESERVED = frozenset({*VERBS, "ratio", "size", "every", "daily", "off", "schedules", "kimi"})
_BOT_KEYS = ("update_interval_s",)
_POLICY_KEYS = ("appliers", "usergroups", "require_second_person", "proposal_ttl_minutes")
_HOST_KEYS = ("url", "token_env", "default")


@dataclass(frozen=True)
class HostSettings:
    """One agent: its name in commands, its API's base URL and where its token is."""

    name: str
    url: str
    token_env: str
    default: bool


@dataclass(frozen=True)
class PolicySettings:
    """Who may change a server, and how long a proposal stays good."""

    appliers: frozenset[str] = frozenset()
    usergroups: frozenset[str] = frozenset()
    require_second_person: bool = False
    proposal_ttl_minutes: int = DEFAULT_PROPOSAL_TTL_MINUTES


@dataclass(frozen=True)
class ChatSettings:
    """The bot core's settings; ``hosts`` in file order, exactly one of them the default."""

    hosts: tuple[HostSettings, ...]
    policy: PolicySettings = PolicySettings()
    update_interval_s: float = DEFAULT_UPDATE_INTERVAL_S

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(host.name for host in self.hosts)

    @property
    def default_host(self) -> HostSettings:
        return next(host for host in self.hosts if host.default)

    def host(self, name: str | None) -> HostSettings:
        """The host called ``name`` (as the grammar resolved it), or the default for None."""
        if name is None:
            return self.default_host
        for host in self.hosts:
            if host.name == name:
                return host
        raise ConfigError(f"no [hosts.{name}] in the configuration")

    def token_for(self, host: HostSettings, environ: Mapping[str, str]) -> Secret:
        return secret_from_env(
            environ, host.token_env, f"the token of the agent on {host.name} ([hosts.{host.name}])"
        )


def load_chat_settings(config: Mapping[str, Any], path: Path | str = "the config") -> ChatSettings:
    """Read ``[bot]``, ``[policy]`` and ``[hosts.*]`` of a parsed config file (``path`` is named
    in errors)."""
    try:
        return _read(config)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _read(config: Mapping[str, Any]) -> ChatSettings:
    bot = Section(config, "bot", _BOT_KEYS)
    policy = Section(config, "policy", _POLICY_KEYS)
    ttl = policy.integer("proposal_ttl_minutes", DEFAULT_PROPOSAL_TTL_MINUTES, minimum=1)
    if ttl > _MAX_TTL_MINUTES:
        raise ConfigError(
            f"[policy] proposal_ttl_minutes must be at most {_MAX_TTL_MINUTES} (a day), not {ttl}"
        )
    return ChatSettings(
        hosts=_hosts(config.get("hosts", {})),
        policy=PolicySettings(
            appliers=frozenset(_ids(policy, "appliers")),
            usergroups=frozenset(_ids(policy, "usergroups")),
            require_second_person=policy.flag("require_second_person", False),
            proposal_ttl_minutes=ttl,
        ),
        update_interval_s=bot.number(
            "update_interval_s", DEFAULT_UPDATE_INTERVAL_S, minimum=_MIN_UPDATE_INTERVAL_S
        ),
    )


def _ids(section: Section, key: str) -> list[str]:
    values = section.text_list(key, [])
    for value in values:
        if not value.strip() or value != value.strip():
            raise ConfigError(f"[{section.name}] {key} holds {value!r}; give ids without spaces")
    return values


def _hosts(raw: object) -> tuple[HostSettings, ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(
            "no agent configured: add a [hosts.NAME] table with url and token_env "
            "(see deploy/kimi-ops.example.toml)"
        )
    hosts = [_host(name, table) for name, table in raw.items()]
    lowered = [host.name.lower() for host in hosts]
    for name in lowered:
        if lowered.count(name) > 1:
            raise ConfigError(f"[hosts.{name}] is given twice (host names ignore case)")
    defaults = [host.name for host in hosts if host.default]
    if len(hosts) == 1 and not defaults:
        only = hosts[0]
        return (HostSettings(only.name, only.url, only.token_env, default=True),)
    if len(defaults) != 1:
        found = ", ".join(defaults) if defaults else "none"
        raise ConfigError(
            f"exactly one [hosts.NAME] must have default = true (found: {found}); commands "
            "without a host go to it"
        )
    return tuple(hosts)


def _host(name: str, table: object) -> HostSettings:
    key = f"hosts.{name}"
    if not isinstance(table, Mapping):
        raise ConfigError(f"[{key}] must be a table with url, token_env and default")
    if not _HOST_NAME.fullmatch(name) or name.isdigit() or name.lower() in _RESERVED:
        raise ConfigError(
            f"host name {name!r} in [{key}] cannot end a command: use letters, digits, '.', '_' "
            "or '-', not only digits and not a command word"
        )
    section = Section({key: table}, key, _HOST_KEYS)
    url = section.text("url")
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ConfigError(f"[{key}] url must be http:// or https:// and a host, not {url!r}")
    token_env = section.text("token_env", DEFAULT_TOKEN_ENV)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_env):
        raise ConfigError(
            f"[{key}] token_env must name an environment variable (it holds the token), "
            f"not {token_env!r}"
        )
    return HostSettings(
        name=name, url=url.rstrip("/"), token_env=token_env, default=section.flag("default", False)
    )
