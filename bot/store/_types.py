"""Column types that keep what goes in exactly as it comes out, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect
from sqlalchemy.types import TypeDecorator

__all__ = ["UTCDateTime"]


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC instant, to the microsecond.

    PostgreSQL stores ``timestamptz``; SQLite has no time zone, so the value is stored as naive
    UTC text and made aware again when read. Naive datetimes are refused before they reach here
    (``_validate.instant``), since guessing their zone would falsify the audit.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise TypeError(f"expected a timezone-aware datetime, got {value!r}")
        utc: datetime = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return utc.replace(tzinfo=None)
        return utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime from the database, got {value!r}")
        instant: datetime = value
        if instant.tzinfo is None:
            return instant.replace(tzinfo=UTC)
        return instant.astimezone(UTC)
