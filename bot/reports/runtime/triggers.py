"""A cadence as an APScheduler trigger, in ``[reports] timezone``."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bot.reports import Cadence

__all__ = ["first_run", "trigger_for"]


def trigger_for(cadence: Cadence, zone: ZoneInfo, first: datetime) -> BaseTrigger:
    """Fires at ``first`` then every interval, or each day at HH:MM in ``zone``."""
    if cadence.daily is not None:
        hour, minute = cadence.daily
        return CronTrigger(hour=hour, minute=minute, timezone=zone)
    return IntervalTrigger(seconds=int(cadence.every_s or 0), start_date=first, timezone=zone)


def first_run(cadence: Cadence, zone: ZoneInfo, now: datetime) -> datetime:
    """When a schedule made at ``now`` first reports: one interval on, or the next HH:MM."""
    if cadence.daily is None:
        return now + timedelta(seconds=int(cadence.every_s or 0))
    fire: datetime | None = trigger_for(cadence, zone, now).get_next_fire_time(None, now)
    assert fire is not None  # a daily cron always fires again
    return fire
