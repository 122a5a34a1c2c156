"""The ``[store]`` section of the config file, and which database a command uses.

Precedence: ``--url`` on the command line, else ``[store] url`` of the config file named by
``--config`` or ``KIMI_OPS_CONFIG``, else a SQLite file ``./kimi-ops.db``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.settings import CONFIG_ENV, Section, find_config_path, load_config
from bot.store._engine import parse_url

__all__ = ["DEFAULT_URL", "StoreSettings", "resolve_settings", "resolve_url"]

DEFAULT_URL = "sqlite:///kimi-ops.db"
_KEYS = ("url", "busy_timeout_s")


@dataclass(frozen=True)
class StoreSettings:
    """``url``: any SQLAlchemy URL; ``busy_timeout_s``: how long a SQLite writer waits its turn."""

    url: str = DEFAULT_URL
    busy_timeout_s: float = 30.0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> StoreSettings:
        section = Section(config, "store", _KEYS)
        url = section.text("url", DEFAULT_URL)
        parse_url(url)
        return cls(url=url, busy_timeout_s=section.number("busy_timeout_s", 30.0, minimum=0.001))


def resolve_settings(
    url: str | None, config: str | None, environ: Mapping[str, str]
) -> StoreSettings:
    """The settings a command runs with (see the module docstring for the precedence)."""
    settings = StoreSettings()
    if config or environ.get(CONFIG_ENV):
        settings = StoreSettings.from_config(load_config(find_config_path(config, environ)))
    if url:
        parse_url(url)
        settings = StoreSettings(url=url, busy_timeout_s=settings.busy_timeout_s)
    return settings


def resolve_url(url: str | None, config: str | None, environ: Mapping[str, str]) -> str:
    return resolve_settings(url, config, environ).url
