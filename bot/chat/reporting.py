"""What the core needs from capacity reporting, as a Protocol: :mod:`bot.reports.runtime`
implements it, the core's report handlers call it, tests pass their own.

The core keeps deciding (who may schedule, recording a recommendation as a proposal); the
reporter gathers figures, draws charts, asks the planner and keeps schedules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from bot.agent_json import PlannedChange
from bot.reports import Cadence, HostReport
from bot.store.records import ReportSchedule

__all__ = ["Advice", "ChartImage", "HostReview", "Reporter"]


@dataclass(frozen=True)
class ChartImage:
    """A host's trend chart: the PNG, its file name and the alt text a front end must send.

    The PNG is drawn by ``draw`` on first use, not when the report is made: drawing takes
    seconds per host and one figure at a time, so a front end posts the report first and the
    charts after it (a report over many hosts reaches the channel as soon as one over one host),
    and a front end that shows no picture never draws one.
    """

    host: str
    draw: Callable[[], bytes] = field(repr=False, compare=False)
    filename: str
    alt: str
    size_px: tuple[int, int]
    title: str = ""  # drawn on the chart and sent with its upload: one title

    @cached_property
    def png(self) -> bytes:
        return self.draw()


@dataclass(frozen=True)
class Advice:
    """A change the samples call for that the planner accepted on the host's live facts."""

    evidence: str  # the figures that called for it
    command: str  # "resize ratio 4"
    change: PlannedChange
    current: str | None  # the setting now, as a person reads it


@dataclass(frozen=True)
class HostReview:
    """What a host's stored samples say beside its report: its chart and any advice (both None
    for a host that did not answer)."""

    chart: ChartImage | None = None
    advice: Advice | None = None


class Reporter(Protocol):
    """Capacity reporting for the core's ``report`` commands; thread-safe."""

    @property
    def timezone(self) -> str:
        """Where ``report daily HH:MM`` is read (``[reports] timezone``)."""
        ...

    def gather(self, hosts: tuple[str, ...]) -> tuple[HostReport, ...]:
        """Every named host's report, asked in parallel; a silent host has ``problem`` set."""
        ...

    def review(self, reports: Sequence[HostReport]) -> tuple[HostReview, ...]:
        """Each report's trend chart and a planner-checked change its samples call for, in the
        reports' order, from one read of the stored samples (empty for a host that did not
        answer)."""
        ...

    def schedule(
        self, channel: str, cadence: Cadence, created_by: str, host: str | None = None
    ) -> ReportSchedule:
        """Report to ``channel`` on ``cadence``, besides the schedules it has already."""
        ...

    def unschedule(
        self, channel: str, schedule_id: int | None = None
    ) -> tuple[ReportSchedule, ...]:
        """Stop ``channel``'s schedule ``schedule_id`` (every one of them when None); the ones
        stopped (none when ``schedule_id`` is not one of that channel's)."""
        ...

    def schedules(self, channel: str | None = None) -> tuple[ReportSchedule, ...]:
        """The schedules in force (in ``channel``, or everywhere)."""
        ...
