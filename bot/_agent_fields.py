"""Reading one field of an agent's JSON answer, for :mod:`bot.agent_json`: each helper checks the
type the agent's API sends and raises :class:`~bot.errors.AgentError` naming the field and where
it is otherwise (JSON has one number type, so a count that arrives as ``true`` or ``7.5`` is
refused, and a time must carry its zone)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar

from bot.errors import AgentError

__all__ = [
    "Json",
    "enum_value",
    "field_of",
    "instant",
    "mapping",
    "number",
    "optional",
    "optional_instant",
    "texts",
    "whole",
]

_T = TypeVar("_T")
Json = Mapping[str, Any]


def mapping(value: object, where: str) -> Json:
    if not isinstance(value, Mapping):
        raise AgentError(f"{where} is {type(value).__name__}, not a JSON object")
    return value


def field_of(data: Json, key: str, kind: type[_T] | tuple[type, ...], where: str) -> _T:
    if key not in data:
        raise AgentError(f"{where} has no {key!r} (keys: {', '.join(sorted(data)) or 'none'})")
    value = data[key]
    # JSON has one number type: an integer-valued field must not be a bool or a float.
    wrong_number = isinstance(value, bool) and kind is not bool
    if wrong_number or not isinstance(value, kind):
        raise AgentError(f"{where}'s {key!r} is {value!r}, not what the agent's API sends")
    return value  # type: ignore[return-value]


def optional(data: Json, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    return None if data.get(key) is None else field_of(data, key, kind, where)


def number(data: Json, key: str, where: str) -> float | None:
    value = optional(data, key, (int, float), where)
    if value is not None and not math.isfinite(value):
        raise AgentError(f"{where}'s {key!r} is {value!r}, not a finite number")
    return None if value is None else float(value)


def whole(data: Json, key: str, where: str) -> int | None:
    """A count that may cross the wire as ``48`` or ``48.0``; never ``48.5`` or ``true``."""
    value = number(data, key, where)
    if value is not None and not value.is_integer():
        raise AgentError(f"{where}'s {key!r} is {value!r}, not a whole number")
    return None if value is None else int(value)


def enum_value(kind: type[_T], value: object, where: str) -> _T:
    try:
        return kind(value)  # type: ignore[call-arg]
    except ValueError:
        raise AgentError(f"{where} {value!r} is not one kimi-ops knows") from None


def instant(value: object, where: str) -> datetime:
    try:
        instant = datetime.fromisoformat(str(value))
    except ValueError:
        raise AgentError(f"{where} {value!r} is not an ISO 8601 time") from None
    if instant.tzinfo is None:
        raise AgentError(f"{where} {value!r} has no time zone; the agent sends UTC offsets")
    return instant


def optional_instant(data: Json, key: str, where: str) -> datetime | None:
    value = data.get(key)
    return None if value is None else instant(value, f"{where}'s {key}")


def texts(data: Json, key: str, where: str) -> tuple[str, ...]:
    values = data.get(key)
    if values is None:
        return ()
    listed = field_of(data, key, list, where)
    if not all(isinstance(value, str) for value in listed):
        raise AgentError(f"{where}'s {key!r} holds something other than text")
    return tuple(listed)
