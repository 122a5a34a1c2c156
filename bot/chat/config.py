"""The bot core's settings: ``[bot]``, ``[policy]`` and one ``[hosts.NAME]`` table per agent.

Every key is documented in ``deploy/kimi-ops.example.toml``::

    [bot]
    update_interval_s = 3             # at most one progress edit per operation this often
    read_deadline_s = 1               # an agent's status-like answer is awaited this long
    [policy]
    appliers = ["U0123456789"]        # user ids who may apply, restart, roll back, schedule
    usergroups = []                   # or members of these user groups
    require_second_person = false     # the applier must not be the proposer
    proposal_ttl_minutes = 15
    [hosts.kimi-01]
    url = "https://kimi-01.internal:7300"
    fingerprint = "sha256:3f1c..."    # what `kimi-ops agent gen-cert` printed (or ca_file = ...)
    token_env = "KIMI_AGENT_TOKEN"    # the variable holding the agent's token, never the token
    default = true

An ``https://`` host is verified by default: against ``fingerprint`` (pinned), a ``ca_file``, or
the system's trust store (:mod:`bot.chat.agent_tls`). ``insecure = true`` turns verification off
for tests and logs a warning at load; a plain ``http://`` URL to a host other than loopback is
accepted (a private link, or the agent's ``allow_plaintext``) with a warning at load, as its
token crosses the network in clear.

Errors name the file, the table and the key. The agent's token is read from the environment only
when a client for that host is made (:meth:`ChatSettings.token_for`), so a command for one host
does not need every host's token.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bot.chat._usage import VERBS
from bot.chat.agent_tls import TlsPolicy
from bot.errors import ConfigError
from bot.reports.settings import load_report_settings
from bot.settings import Secret, Section, secret_from_env
from bot.tls import is_loopback, parse_fingerprint

__all__ = [
    "DEFAULT_PROPOSAL_TTL_MINUTES",
    "DEFAULT_READ_DEADLINE_S",
    "DEFAULT_UPDATE_INTERVAL_S",
    "ChatSettings",
    "HostSettings",
    "PolicySettings",
    "load_chat_settings",
]

DEFAULT_UPDATE_INTERVAL_S = 3.0
DEFAULT_READ_DEADLINE_S = 1.0
DEFAULT_PROPOSAL_TTL_MINUTES = 15
DEFAULT_TOKEN_ENV = "KIMI_AGENT_TOKEN"
# Slack's chat.update is Tier 3 (about 50 a minute per workspace): one edit a second is the floor.
_MIN_UPDATE_INTERVAL_S = 1.0
_MAX_TTL_MINUTES = 24 * 60
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", re.ASCII)
# A host is the last word of a command: it must not read as a number or a grammar word.
_RESERVED = frozenset({*VERBS, "ratio", "size", "every", "daily", "off", "schedules", "kimi"})
_BOT_KEYS = ("update_interval_s", "read_deadline_s")
#: An agent's status read does NVML and psutil (well under a second); a deadline shorter than
#: this would mark healthy agents silent.
_MIN_READ_DEADLINE_S = 0.2
_POLICY_KEYS = ("appliers", "usergroups", "require_second_person", "proposal_ttl_minutes")
_HOST_KEYS = ("url", "token_env", "default", "ca_file", "fingerprint", "insecure")
_TLS_KEYS = ("ca_file", "fingerprint", "insecure")

log = logging.getLogger("bot.chat.config")


@dataclass(frozen=True)
class HostSettings:
    """One agent: its name in commands, its API's base URL, where its token is and how its
    certificate is checked."""

    name: str
    url: str
    token_env: str
    default: bool
    tls: TlsPolicy = field(default_factory=TlsPolicy)


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
    #: How long each agent's status-like answer is awaited (status, hosts, fleets, report).
    read_deadline_s: float = DEFAULT_READ_DEADLINE_S
    #: ``[reports] timezone``: where ``report daily HH:MM`` is read and times are shown, in
    #: every process of the config (a terminal too, which runs no report scheduler).
    timezone: str = "UTC"

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
        read_deadline_s=bot.number(
            "read_deadline_s", DEFAULT_READ_DEADLINE_S, minimum=_MIN_READ_DEADLINE_S
        ),
        timezone=_report_zone(config),
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
        return (replace(only, default=True),)
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
    try:
        urlsplit(url).port  # noqa: B018 -- parses the host and port: "http://[" and ":x" fail
    except ValueError as exc:
        raise ConfigError(f"[{key}] url {url!r} does not parse as a URL: {exc}") from exc
    token_env = section.text("token_env", DEFAULT_TOKEN_ENV)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_env):
        raise ConfigError(
            f"[{key}] token_env must name an environment variable (it holds the token), "
            f"not {token_env!r}"
        )
    return HostSettings(
        name=name,
        url=url.rstrip("/"),
        token_env=token_env,
        default=section.flag("default", False),
        tls=_tls(section, key, url),
    )


def _tls(section: Section, key: str, url: str) -> TlsPolicy:
    ca_file = section.optional_text("ca_file")
    fingerprint = section.optional_text("fingerprint")
    insecure = section.flag("insecure", False)
    values = (ca_file, fingerprint, insecure)
    given = [name for name, value in zip(_TLS_KEYS, values, strict=True) if value]
    https = url.lower().startswith("https://")
    if given and not https:
        raise ConfigError(
            f"[{key}] {given[0]} needs an https:// url (the agent serves TLS once [agent] "
            f"tls_cert is set), not {url!r}"
        )
    if len(given) > 1:
        raise ConfigError(
            f"[{key}] sets {' and '.join(given)}; choose one: fingerprint pins the agent's own "
            "certificate, ca_file trusts a CA, insecure checks nothing (tests only)"
        )
    if ca_file is not None and not Path(ca_file).is_file():
        raise ConfigError(f"[{key}] ca_file {ca_file!r} does not exist or is not a file")
    pinned = None if fingerprint is None else parse_fingerprint(fingerprint, f"[{key}] fingerprint")
    policy = TlsPolicy(
        ca_file=None if ca_file is None else Path(ca_file), fingerprint=pinned, insecure=insecure
    )
    if insecure:
        log.warning(
            "[%s] insecure = true: the agent's certificate is NOT checked, so anyone on the path "
            "can pose as it and take its token; use fingerprint or ca_file outside tests",
            key,
        )
    host = urlsplit(url).hostname or ""
    if not https and not is_loopback(host):
        log.warning(
            "[%s] url %s is plain http to a host other than loopback: the agent's token crosses "
            "the network in clear; serve the agent with TLS and pin its fingerprint",
            key,
            url,
        )
    return policy


def _report_zone(config: Mapping[str, Any]) -> str:
    """``[reports] timezone`` for the times the chat shows; a ``[reports]`` section that does
    not load is left to the report settings' own reader to refuse, naming its key, where reports
    run (``kimi-ops bot``, ``kimi-ops report``): the chat then shows times in UTC."""
    try:
        return load_report_settings(config).timezone
    except ConfigError:
        return "UTC"
