"""Settings: one TOML file (named by ``--config`` or ``KIMI_OPS_CONFIG``) plus secrets from the
environment.

Each part of kimi-ops reads its own section (``[agent]``, ``[bot]``, ``[store]``, ...) into a
frozen dataclass of its own, with the helpers here, so a wrong key or type fails at start with the
file, the section, the key and what was expected. Every key is documented in
``deploy/kimi-ops.example.toml``. Secrets never live in the file: the file names the environment
variable that holds them, and a :class:`Secret` never shows its value in ``repr`` or ``str``.
"""

from __future__ import annotations

import hmac
import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bot.errors import ConfigError

__all__ = [
    "CONFIG_ENV",
    "KNOWN_SECTIONS",
    "MAX_SETTING",
    "Secret",
    "Section",
    "find_config_path",
    "load_config",
    "secret_from_env",
]

CONFIG_ENV = "KIMI_OPS_CONFIG"
#: No number in the file is larger: a billion seconds is 31 years, a billion GB an exabyte. A
#: larger value is a typo, and would overflow a timer or a date later, far from the file.
MAX_SETTING = 1_000_000_000

#: Every top-level table a kimi-ops config file may hold; a part that reads a new section adds
#: it here (and documents it in ``deploy/kimi-ops.example.toml``).
KNOWN_SECTIONS: tuple[str, ...] = (
    "agent",
    "bot",
    "fleets",
    "hosts",
    "policy",
    "reports",
    "slack",
    "store",
)


class Secret:
    """A value that must not be printed: ``repr`` and ``str`` show stars, ``reveal()`` the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        # Constant time: how long a comparison takes must not tell how much of a secret matched.
        return isinstance(other, Secret) and hmac.compare_digest(
            other._value.encode(), self._value.encode()
        )

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


def find_config_path(cli_value: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The config file: ``--config`` wins, then ``KIMI_OPS_CONFIG``."""
    env = os.environ if environ is None else environ
    value = cli_value or env.get(CONFIG_ENV)
    if not value:
        raise ConfigError(
            f"no configuration file: pass --config FILE or set {CONFIG_ENV} "
            "(deploy/kimi-ops.example.toml documents every key)"
        )
    return Path(value)


def load_config(path: Path) -> dict[str, Any]:
    """Parse the TOML file, translating I/O and syntax errors into :class:`ConfigError`.

    A top-level table kimi-ops does not know (``[stor]`` for ``[store]``) is an error naming it,
    rather than silently leaving that part on its defaults.
    """
    try:
        with path.open("rb") as handle:
            config = tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"configuration file {str(path)!r} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"configuration file {str(path)!r} cannot be read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {str(path)!r} is not valid TOML: {exc}") from exc
    unknown = sorted(set(config) - set(KNOWN_SECTIONS))
    if unknown:
        raise ConfigError(
            f"unknown section [{unknown[0]}] in {str(path)!r}; known sections: "
            + ", ".join(f"[{name}]" for name in KNOWN_SECTIONS)
        )
    return config


def secret_from_env(environ: Mapping[str, str], variable: str, purpose: str) -> Secret:
    """Read a secret from the environment variable the config names."""
    value = environ.get(variable, "")
    if not value:
        raise ConfigError(f"environment variable {variable} is not set; it must hold {purpose}")
    return Secret(value)


class Section:
    """Typed, checked access to one ``[section]`` of the config file."""

    def __init__(self, config: Mapping[str, Any], name: str, known: Iterable[str]) -> None:
        raw = config.get(name, {})
        if not isinstance(raw, Mapping):
            raise ConfigError(f"[{name}] must be a table")
        self.name = name
        self._raw: Mapping[str, Any] = raw
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown key {unknown[0]!r} in [{name}]; known keys: {', '.join(sorted(known))}"
            )

    def _get(self, key: str, default: Any, kinds: tuple[type, ...], expected: str) -> Any:
        if key not in self._raw:
            if default is _REQUIRED:
                raise ConfigError(f"[{self.name}] {key} is required ({expected})")
            return default
        value = self._raw[key]
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise ConfigError(f"[{self.name}] {key} must be {expected}, not {value!r}")
        return value

    def text(self, key: str, default: str | None = None) -> str:
        value: str = self._get(key, _REQUIRED if default is None else default, (str,), "a string")
        return value

    def optional_text(self, key: str) -> str | None:
        value: str | None = self._get(key, None, (str,), "a string")
        return value

    def integer(self, key: str, default: int | None = None, minimum: int | None = None) -> int:
        value: int = self._get(key, _REQUIRED if default is None else default, (int,), "an integer")
        if minimum is not None and value < minimum:
            raise ConfigError(f"[{self.name}] {key} must be at least {minimum}, not {value}")
        self._at_most_ceiling(key, value)
        return value

    def number(self, key: str, default: float | None = None, minimum: float | None = None) -> float:
        raw = self._get(key, _REQUIRED if default is None else default, (int, float), "a number")
        # TOML reads nan, inf and integers of any length: none of them is a setting.
        value = float(raw) if abs(raw) < 1e300 else math.inf
        if not math.isfinite(value):
            raise ConfigError(f"[{self.name}] {key} must be a finite number, not {raw!r}")
        if minimum is not None and value < minimum:
            raise ConfigError(f"[{self.name}] {key} must be at least {minimum}, not {value:g}")
        self._at_most_ceiling(key, value)
        return value

    def _at_most_ceiling(self, key: str, value: float) -> None:
        if abs(value) > MAX_SETTING:
            raise ConfigError(
                f"[{self.name}] {key} is {value:g}, beyond any setting kimi-ops reads (at most "
                f"{MAX_SETTING:,}); check the value"
            )

    def flag(self, key: str, default: bool | None = None) -> bool:
        value: bool = self._get(
            key, _REQUIRED if default is None else default, (bool,), "true or false"
        )
        return value

    def text_list(self, key: str, default: list[str] | None = None) -> list[str]:
        value = self._get(
            key, _REQUIRED if default is None else default, (list,), "a list of strings"
        )
        if not all(isinstance(item, str) for item in value):
            raise ConfigError(f"[{self.name}] {key} must be a list of strings")
        return list(value)

    def choice(self, key: str, choices: Iterable[str], default: str | None = None) -> str:
        options = list(choices)
        value = self.text(key, default)
        if value not in options:
            raise ConfigError(
                f"[{self.name}] {key} is {value!r}; expected one of: {', '.join(options)}"
            )
        return value


_REQUIRED: Any = object()
