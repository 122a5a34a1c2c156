"""Capacity samples (a time series per host) and the schedules of capacity reports."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select

from bot.errors import InputError
from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._convert import sample_record, schedule_record
from bot.store._lookup import row_by_id
from bot.store._models import CHANNEL, HOST, USER, CapacitySampleRow, ReportScheduleRow
from bot.store.records import CapacitySample, ReportSchedule

__all__ = ["CapacityMixin"]


def _sample_row(sample: CapacitySample) -> CapacitySampleRow:
    if not isinstance(sample, CapacitySample):
        raise InputError(f"a capacity sample must be a CapacitySample, not {type(sample).__name__}")
    return CapacitySampleRow(
        host=v.text("host", sample.host, HOST),
        at=v.instant("sample time", sample.at),
        ram_total_bytes=v.optional_count("RAM total bytes", sample.ram_total_bytes),
        ram_available_bytes=v.optional_count("RAM available bytes", sample.ram_available_bytes),
        hicache_host_bytes=v.optional_count("HiCache host bytes", sample.hicache_host_bytes),
        device_tokens=v.optional_count("device tokens", sample.device_tokens),
        host_tokens=v.optional_count("host tokens", sample.host_tokens),
        token_usage=v.optional_finite("token usage", sample.token_usage, 0, 1),
        queued_requests=v.optional_count("queued requests", sample.queued_requests, big=False),
        running_requests=v.optional_count("running requests", sample.running_requests, big=False),
        cache_hit_rate=v.optional_finite("cache hit rate", sample.cache_hit_rate, 0, 1),
        gpus=v.json_list("GPU figures", sample.gpus),
    )


class CapacityMixin(StoreBase):
    def add_capacity_sample(self, sample: CapacitySample) -> int:
        """Store one sample; returns its id."""
        row = _sample_row(sample)
        with self._write("store a capacity sample") as session:
            session.add(row)
            session.flush()
            return row.id

    def add_capacity_samples(self, samples: Sequence[CapacitySample]) -> list[int]:
        """Store ``samples`` in one transaction, all or none; their ids, in order.

        One transaction, not one per sample: a report over 50 hosts stores 50 samples, and a
        commit each (a sync of the SQLite file each) cost more than asking the 50 agents.
        """
        rows = [_sample_row(sample) for sample in samples]  # every sample checked before writing
        if not rows:
            return []
        with self._write(f"store {len(rows)} capacity samples") as session:
            session.add_all(rows)
            session.flush()
            return [row.id for row in rows]

    def capacity_samples(
        self, host: str, since: datetime, until: datetime | None = None
    ) -> list[CapacitySample]:
        """Samples of ``host`` taken at or after ``since`` (and before ``until``), oldest first."""
        (samples,) = self.capacity_samples_of([host], since, until).values()
        return samples

    def capacity_samples_of(
        self, hosts: Sequence[str], since: datetime, until: datetime | None = None
    ) -> dict[str, list[CapacitySample]]:
        """Each of ``hosts``' samples taken at or after ``since`` (and before ``until``), oldest
        first, in one read (a report over 50 hosts made 50); every host named has a list."""
        names = [v.text("host", host, HOST) for host in hosts]
        found: dict[str, list[CapacitySample]] = {name: [] for name in names}
        if not names:
            return found
        query = select(CapacitySampleRow).where(
            CapacitySampleRow.host.in_(names),
            CapacitySampleRow.at >= v.instant("since", since),
        )
        if until is not None:
            query = query.where(CapacitySampleRow.at < v.instant("until", until))
        query = query.order_by(CapacitySampleRow.at, CapacitySampleRow.id)
        with self._read("read capacity samples") as session:
            for row in session.scalars(query):
                found[row.host].append(sample_record(row))
        return found

    def delete_capacity_samples(self, before: datetime) -> int:
        """Delete every host's samples taken before ``before``; how many were deleted."""
        cut = v.instant("before", before)
        with self._write("delete old capacity samples") as session:
            old = CapacitySampleRow.at < cut
            count = session.scalar(select(func.count()).select_from(CapacitySampleRow).where(old))
            session.execute(delete(CapacitySampleRow).where(old))
            return int(count or 0)

    def add_schedule(
        self,
        channel: str,
        cadence: str,
        next_run_at: datetime,
        created_by: str,
        *,
        host: str | None = None,
        at: datetime | None = None,
    ) -> ReportSchedule:
        """Schedule capacity reports to ``channel`` (``host`` None: every host)."""
        row = ReportScheduleRow(
            channel=v.text("channel", channel, CHANNEL),
            cadence=v.text("cadence", cadence, 128),
            next_run_at=v.instant("next run", next_run_at),
            created_by=v.text("created by (Slack user id)", created_by, USER),
            host=v.optional_text("host", host, HOST),
            created_at=self._at(at),
            enabled=True,
        )
        with self._write("add a report schedule") as session:
            session.add(row)
            session.flush()
            return schedule_record(row)

    def schedule(self, schedule_id: int) -> ReportSchedule:
        with self._read("read a report schedule") as session:
            return schedule_record(row_by_id(session, ReportScheduleRow, schedule_id))

    def schedules(
        self, *, channel: str | None = None, enabled_only: bool = False
    ) -> list[ReportSchedule]:
        query = select(ReportScheduleRow)
        if channel is not None:
            query = query.where(ReportScheduleRow.channel == v.text("channel", channel, CHANNEL))
        if enabled_only:
            query = query.where(ReportScheduleRow.enabled.is_(True))
        with self._read("read report schedules") as session:
            rows = session.scalars(query.order_by(ReportScheduleRow.id))
            return [schedule_record(row) for row in rows]

    def due_schedules(self, now: datetime) -> list[ReportSchedule]:
        """Enabled schedules whose next run is at or before ``now``, soonest first."""
        query = (
            select(ReportScheduleRow)
            .where(
                ReportScheduleRow.enabled.is_(True),
                ReportScheduleRow.next_run_at <= v.instant("now", now),
            )
            .order_by(ReportScheduleRow.next_run_at, ReportScheduleRow.id)
        )
        with self._read("read due report schedules") as session:
            return [schedule_record(row) for row in session.scalars(query)]

    def update_schedule(
        self,
        schedule_id: int,
        *,
        cadence: str | None = None,
        next_run_at: datetime | None = None,
        enabled: bool | None = None,
    ) -> ReportSchedule:
        new_cadence = None if cadence is None else v.text("cadence", cadence, 128)
        new_next = None if next_run_at is None else v.instant("next run", next_run_at)
        if enabled is not None and not isinstance(enabled, bool):
            raise InputError(f"enabled must be true or false, not {enabled!r}")
        with self._write("update a report schedule") as session:
            row = row_by_id(session, ReportScheduleRow, schedule_id)
            if new_cadence is not None:
                row.cadence = new_cadence
            if new_next is not None:
                row.next_run_at = new_next
            if enabled is not None:
                row.enabled = enabled
            return schedule_record(row)

    def delete_schedule(self, schedule_id: int) -> None:
        with self._write("delete a report schedule") as session:
            session.delete(row_by_id(session, ReportScheduleRow, schedule_id))
