"""Checks on what callers hand the store, so bad input fails with a clear error before any write.

Each check returns the value as stored, or raises :class:`InputError` naming the field, the value
and what is expected. Rules that hold on every backend are enforced here rather than left to the
database: PostgreSQL refuses NUL characters in text and NaN in JSON that SQLite would take, and an
audit must not depend on which one is configured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from bot.errors import InputError

__all__ = [
    "count",
    "finite",
    "free_text",
    "instant",
    "json_list",
    "json_object",
    "member",
    "optional_count",
    "optional_finite",
    "optional_member",
    "optional_text",
    "text",
    "text_list",
]

_BIGINT_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1


def _shown(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def text(name: str, value: object, max_len: int) -> str:
    """A non-empty string of at most ``max_len`` characters, with no NUL."""
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, not {_shown(value)}")
    if not value.strip():
        raise InputError(f"{name} is empty; give a non-empty value")
    return _clean(name, value, max_len)


def optional_text(name: str, value: object, max_len: int) -> str | None:
    return None if value is None else text(name, value, max_len)


def free_text(name: str, value: object, max_len: int = 100_000) -> str:
    """A string that may be empty (a reason, a message), with no NUL."""
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, not {_shown(value)}")
    return _clean(name, value, max_len)


def _clean(name: str, value: str, max_len: int) -> str:
    if len(value) > max_len:
        raise InputError(
            f"{name} is {len(value)} characters long; at most {max_len} are stored "
            f"(starts {_shown(value[:40])})"
        )
    if "\x00" in value:
        raise InputError(f"{name} {_shown(value)} contains a NUL character; remove it")
    return value


def text_list(name: str, values: Iterable[object], max_len: int = 100_000) -> list[str]:
    if isinstance(values, str):
        raise InputError(f"{name} must be a list of strings, not the string {_shown(values)}")
    return [free_text(f"{name}[{i}]", value, max_len) for i, value in enumerate(values)]


def instant(name: str, value: object) -> datetime:
    """A timezone-aware datetime, converted to UTC."""
    if not isinstance(value, datetime):
        raise InputError(f"{name} must be a datetime, not {_shown(value)}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InputError(
            f"{name} {value.isoformat()} has no time zone; pass an aware datetime "
            "(e.g. datetime.now(UTC)) so the audit is not off by an unknown offset"
        )
    return value.astimezone(UTC)


def finite(
    name: str, value: object, minimum: float | None = None, maximum: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{name} must be a number, not {_shown(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise InputError(f"{name} is {value!r}; it must be a finite number")
    if minimum is not None and number < minimum:
        raise InputError(f"{name} is {value!r}; it must be at least {minimum:g}")
    if maximum is not None and number > maximum:
        raise InputError(f"{name} is {value!r}; it must be at most {maximum:g}")
    return number


def optional_finite(
    name: str, value: object, minimum: float | None = None, maximum: float | None = None
) -> float | None:
    return None if value is None else finite(name, value, minimum, maximum)


def count(name: str, value: object, minimum: int = 0, big: bool = True) -> int:
    """A whole number in ``[minimum, 2**63-1]`` (``big=False``: 32-bit)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be a whole number, not {_shown(value)}")
    top = _BIGINT_MAX if big else _INT_MAX
    if not minimum <= value <= top:
        raise InputError(f"{name} is {value}; it must be between {minimum} and {top}")
    return value


def optional_count(name: str, value: object, minimum: int = 0, big: bool = True) -> int | None:
    return None if value is None else count(name, value, minimum, big)


def json_object(name: str, value: object) -> dict[str, Any]:
    """A JSON-able mapping with finite numbers, as a plain dict (a deep copy)."""
    if not isinstance(value, Mapping):
        raise InputError(f"{name} must be a mapping, not {_shown(value)}")
    result = _json_roundtrip(name, value)
    assert isinstance(result, dict)
    return result


def json_list(name: str, values: Iterable[object]) -> list[Any]:
    if isinstance(values, str | bytes | Mapping):
        raise InputError(f"{name} must be a sequence, not {_shown(values)}")
    result = _json_roundtrip(name, list(values))
    assert isinstance(result, list)
    return result


def _json_roundtrip(name: str, value: object) -> Any:
    try:
        encoded = json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise InputError(
            f"{name} holds NaN or infinity ({exc}); JSON and PostgreSQL cannot store it"
        ) from exc
    except TypeError as exc:
        raise InputError(
            f"{name} is not JSON-able ({exc}); use strings, numbers, lists and dicts"
        ) from exc
    _check_keys(name, value)
    if "\\u0000" in encoded:
        raise InputError(f"{name} contains a NUL character; remove it")
    return json.loads(encoded)


def _check_keys(name: str, value: object) -> None:
    # json.dumps turns 1 into "1" silently; a key must come back as it went in.
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(f"{name} has the key {key!r}; JSON keys must be strings")
            _check_keys(f"{name}[{key!r}]", item)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_keys(f"{name}[{i}]", item)


_Member = TypeVar("_Member", bound=StrEnum)


def member(name: str, kind: type[_Member], value: object) -> _Member:
    """A member of the ``StrEnum`` ``kind`` (:mod:`bot.vocab`'s lists), given as itself or its
    value: the one spelling each state or kind has."""
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    known = ", ".join(m.value for m in kind)
    raise InputError(f"{name} {_shown(value)} is not known; use one of: {known}")


def optional_member(name: str, kind: type[_Member], value: object) -> _Member | None:
    return None if value is None else member(name, kind, value)
