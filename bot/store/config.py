"""The ``[store]`` section of the config file, and which database a command uses.

Precedence: ``--url`` on the command line, else ``[store] url`` of the config file named by
``--config`` or ``KIMI_OPS_CONFIG``, else a SQLite file ``./kimi-ops.db``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import URL

from bot.db import parse_url
from bot.errors import ConfigError, InputError
from bot.settings import (
    CONFIG_ENV,
    Secret,
    Section,
    find_config_path,
    load_config,
    secret_from_env,
)

__all__ = ["DEFAULT_URL", "StoreSettings", "resolve_settings", "resolve_url"]

DEFAULT_URL = "sqlite:///kimi-ops.db"
_KEYS = ("url", "busy_timeout_s", "password_env")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class StoreSettings:
    """``url``: any SQLAlchemy URL, without a password; ``password``: from the environment
    variable ``[store] password_env`` names; ``busy_timeout_s``: how long a SQLite writer waits."""

    url: str = DEFAULT_URL
    busy_timeout_s: float = 30.0
    password: Secret | None = None

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> StoreSettings:
        section = Section(config, "store", _KEYS)
        url = section.text("url", DEFAULT_URL)
        try:
            parsed = parse_url(url)
        except InputError as exc:
            raise ConfigError(f"[store] url: {exc}") from exc
        if parsed.password is not None:
            raise ConfigError(
                "[store] url holds a password; remove it from the URL and name the environment "
                "variable that holds it in [store] password_env"
            )
        variable = section.optional_text("password_env")
        if variable is not None and not _VARIABLE.fullmatch(variable):
            raise ConfigError(
                "[store] password_env must name the environment variable that holds the "
                f"password, such as KIMI_DB_PASSWORD, not {variable!r}"
            )
        password = (
            None
            if variable is None
            else secret_from_env(
                environ or {}, variable, "the database password ([store] password_env names it)"
            )
        )
        return cls(
            url=url,
            busy_timeout_s=section.number("busy_timeout_s", 30.0, minimum=0.001),
            password=password,
        )

    def engine_url(self) -> URL:
        """The URL to connect with, password included (never print it: use ``url``)."""
        parsed = parse_url(self.url)
        if self.password is None:
            return parsed
        return parsed.set(password=self.password.reveal())


def resolve_settings(
    url: str | None, config: str | None, environ: Mapping[str, str]
) -> StoreSettings:
    """The settings a command runs with (see the module docstring for the precedence)."""
    settings = StoreSettings()
    if config or environ.get(CONFIG_ENV):
        settings = StoreSettings.from_config(
            load_config(find_config_path(config, environ)), environ
        )
    if url:
        parse_url(url)
        settings = StoreSettings(url=url, busy_timeout_s=settings.busy_timeout_s)
    return settings


def resolve_url(url: str | None, config: str | None, environ: Mapping[str, str]) -> str:
    return resolve_settings(url, config, environ).url
