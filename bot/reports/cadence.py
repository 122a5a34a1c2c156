"""A report schedule's cadence, as the store keeps it and people read it.

``every 21600s`` <-> ``Cadence(every_s=21600)`` (shown "every 6h");
``daily 09:00`` <-> ``Cadence(daily=(9, 0))`` (in ``[reports] timezone``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.errors import InputError

__all__ = ["Cadence"]

_EVERY = re.compile(r"every ([0-9]{1,7})s")
_DAILY = re.compile(r"daily ([0-9]{2}):([0-9]{2})")


@dataclass(frozen=True)
class Cadence:
    every_s: int | None = None
    daily: tuple[int, int] | None = None  # hour, minute

    def __post_init__(self) -> None:
        if (self.every_s is None) == (self.daily is None):
            raise InputError("a cadence is either an interval or a time of day, not both")

    @property
    def text(self) -> str:
        """The form stored in ``report_schedules.cadence``."""
        if self.daily is not None:
            return f"daily {self.daily[0]:02d}:{self.daily[1]:02d}"
        return f"every {self.every_s}s"

    @property
    def shown(self) -> str:
        """The form people typed: ``every 6h``, ``every 90m``, ``daily 09:00``."""
        if self.daily is not None:
            return self.text
        seconds = int(self.every_s or 0)
        for unit, size in (("d", 86400), ("h", 3600)):
            if seconds % size == 0:
                return f"every {seconds // size}{unit}"
        return f"every {seconds // 60}m"

    @classmethod
    def parse(cls, text: str) -> Cadence:
        every = _EVERY.fullmatch(text)
        if every is not None:
            return cls(every_s=int(every.group(1)))
        daily = _DAILY.fullmatch(text)
        if daily is not None:
            return cls(daily=(int(daily.group(1)), int(daily.group(2))))
        raise InputError(f"cadence {text!r} is neither 'every <seconds>s' nor 'daily HH:MM'")
