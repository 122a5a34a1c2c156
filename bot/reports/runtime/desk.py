"""The :class:`~bot.chat.reporting.Reporter` the core's ``report`` commands use: reports asked
of the agents in parallel (each answering host's figures stored as a sample), charts from the
stored samples, planner-checked advice, and the schedules in the store.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from bot.chat.agent_client import AgentClient
from bot.chat.reporting import ChartImage, HostReview
from bot.clock import Clock
from bot.reports import (
    CHART_PX,
    Cadence,
    HostReport,
    ReportSettings,
    alt_text,
    chart_title,
    chart_window,
    render_chart,
    sample_of,
)
from bot.reports.runtime.advice import advise
from bot.reports.runtime.collect import MetricsSource, collect_reports
from bot.reports.runtime.triggers import first_run
from bot.store import CapacitySample, ReportSchedule, Store

__all__ = ["ReportDesk"]


class ReportDesk:
    """Reports over ``clients``' hosts; ``on_schedules_changed`` tells the scheduler (when this
    process runs one) to pick a new or stopped schedule up at once."""

    def __init__(
        self,
        clients: Mapping[str, AgentClient],
        store: Store,
        settings: ReportSettings,
        source: MetricsSource,
        clock: Clock,
        on_schedules_changed: Callable[[], None] | None = None,
    ) -> None:
        self._clients = clients
        self._store = store
        self._settings = settings
        self._source = source
        self._clock = clock
        self.on_schedules_changed = on_schedules_changed
        self._schedule_lock = threading.Lock()

    @property
    def timezone(self) -> str:
        return self._settings.timezone

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(self._clients)

    def gather(self, hosts: tuple[str, ...]) -> tuple[HostReport, ...]:
        """Every host's report now; what each answering host said is also stored as a sample."""
        reports = tuple(
            self._audit_numbered(report)
            for report in collect_reports(hosts, self._clients, self._source, self._clock)
        )
        samples = [sample for sample in map(sample_of, reports) if sample is not None]
        self._store.add_capacity_samples(samples)
        return reports

    def _audit_numbered(self, report: HostReport) -> HostReport:
        """The report with its revision as ``history`` numbers it: the agents count their own
        revisions, each from 1, so the agent's number means nothing beside the history."""
        if report.revision is None:
            return report
        found = self._store.revision_by_agent_id(report.host, report.revision)
        return dataclasses.replace(report, revision=None if found is None else found.id)

    def forget_old_samples(self) -> int:
        """Delete the samples older than ``[reports] keep_days``; how many went."""
        before = self._clock.now() - timedelta(days=self._settings.keep_days)
        return self._store.delete_capacity_samples(before)

    def samples(self, host: str, until: datetime | None = None) -> list[CapacitySample]:
        """The host's samples of the chart's window (the last ``window_hours``)."""
        now = until or self._clock.now()
        since = now - timedelta(hours=self._settings.window_hours)
        return self._store.capacity_samples(host, since, now + timedelta(microseconds=1))

    def review(self, reports: Sequence[HostReport]) -> tuple[HostReview, ...]:
        """Each host's chart and advice, from one read of every host's samples: a host that
        did not answer still has the chart of what was stored before (advice needs it live)."""
        if not reports:
            return ()
        window = timedelta(hours=self._settings.window_hours)
        found = self._store.capacity_samples_of(
            sorted({report.host for report in reports}),
            min(report.at for report in reports) - window,
            max(report.at for report in reports) + timedelta(microseconds=1),
        )
        reviews = []
        for report in reports:
            since = report.at - window  # the chart's window ends at the report, as samples() reads
            own = [s for s in found[report.host] if since <= s.at <= report.at]
            if report.answered:
                reviews.append(self._review(report, own))
            else:
                reviews.append(HostReview(chart=self._chart(report, own) if own else None))
        return tuple(reviews)

    def _review(self, report: HostReport, samples: list[CapacitySample]) -> HostReview:
        client = self._clients[report.host]
        return HostReview(
            chart=self._chart(report, samples),
            advice=advise(report, samples, client, self._settings.rules, report.at),
        )

    def chart(self, report: HostReport) -> ChartImage | None:
        """The host's chart alone (for a front end or a bench that wants no advice); None for a
        host that did not answer and has no sample of the window stored."""
        samples = self.samples(report.host, report.at)
        return self._chart(report, samples) if samples or report.answered else None

    def _chart(self, report: HostReport, samples: list[CapacitySample]) -> ChartImage:
        # Drawn in the configured zone, as the schedules read theirs.
        end = report.at.astimezone(self._settings.zone)
        start = chart_window(samples, end, self._settings.window_hours)
        changes = tuple(c for c in report.changes if start <= c.at <= end)
        return ChartImage(
            host=report.host,
            draw=functools.partial(render_chart, report.host, samples, changes, start, end),
            filename=f"{report.host}-capacity-{end:%Y%m%d-%H%M}.png",
            alt=alt_text(report.host, samples, changes),
            size_px=CHART_PX,
            title=chart_title(report.host, start, end),
        )

    def _changed(self) -> None:
        if self.on_schedules_changed is not None:
            self.on_schedules_changed()

    def schedule(
        self, channel: str, cadence: Cadence, created_by: str, host: str | None = None
    ) -> ReportSchedule:
        now = self._clock.now()
        with self._schedule_lock:
            made = self._store.add_schedule(
                channel,
                cadence.text,
                first_run(cadence, self._settings.zone, now),
                created_by,
                host=host,
                at=now,
            )
        self._changed()
        return made

    def unschedule(
        self, channel: str, schedule_id: int | None = None
    ) -> tuple[ReportSchedule, ...]:
        with self._schedule_lock:
            found = self._store.schedules(channel=channel)
            if schedule_id is not None:
                found = [old for old in found if old.id == schedule_id]
            stopped = tuple(old for old in found if old.enabled)
            for old in found:
                self._store.delete_schedule(old.id)
        self._changed()
        return stopped

    def schedules(self, channel: str | None = None) -> tuple[ReportSchedule, ...]:
        return tuple(self._store.schedules(channel=channel, enabled_only=True))
