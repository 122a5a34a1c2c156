"""Sample retention: the sampling job deletes capacity samples older than [reports] keep_days,
read against an injected clock, in a real SQLite store; a keep_days shorter than the chart's
window is refused by name."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.errors import ConfigError
from bot.reports import ReportSettings, load_report_settings
from bot.reports.runtime import ReportScheduler, attach_reports
from bot.store import CapacitySample, Store
from tests.chat._core_fixtures import RecordingFrontEnd, chat_settings, running_core
from tests.chat.conftest import free_port
from tests.reports._fixtures import T0, RecordingPoster, SetClock

HOSTS = ("kimi-01", "kimi-02")


def _sample(host: str, age: timedelta) -> CapacitySample:
    return CapacitySample(host=host, at=T0 - age, ram_total_bytes=449 * 10**9)


def test_the_sampling_job_deletes_samples_older_than_keep_days(store: Store) -> None:
    """At T0 with keep_days 30, the job keeps samples taken at T0 - 30 days or later and deletes
    the older ones, of every host; its own hosts do not answer, so it adds none."""
    ages = {
        "40 days": timedelta(days=40),
        "30 days 1 s": timedelta(days=30, seconds=1),
        "30 days": timedelta(days=30),
        "29 days": timedelta(days=29),
        "1 hour": timedelta(hours=1),
    }
    for host in HOSTS:
        for age in ages.values():
            store.add_capacity_sample(_sample(host, age))
    settings = ReportSettings(keep_days=30)
    clock = SetClock(T0)
    hosts = {"kimi-01": f"http://127.0.0.1:{free_port()}"}
    with running_core(chat_settings(hosts), store, RecordingFrontEnd(), clock=clock) as core:
        desk = attach_reports(core, store, settings)
        scheduler = ReportScheduler(
            core.context, desk, RecordingPoster(), store, settings, clock=clock
        )
        scheduler.run_sample()
    kept = [ages["30 days"], ages["29 days"], ages["1 hour"]]
    for host in HOSTS:
        left = store.capacity_samples(host, T0 - timedelta(days=365))
        assert [T0 - s.at for s in left] == kept


def test_keep_days_is_thirty_by_default_and_must_cover_the_chart() -> None:
    """No keep_days means 30; 0 is refused; 1 day under a 48 h window is refused naming both."""
    assert load_report_settings({}).keep_days == 30
    assert load_report_settings({"reports": {"keep_days": 7}}).keep_days == 7
    with pytest.raises(ConfigError, match="keep_days"):
        load_report_settings({"reports": {"keep_days": 0}})
    with pytest.raises(ConfigError, match=r"keep_days \(1\).*window_hours \(48\).*at least 2"):
        load_report_settings({"reports": {"keep_days": 1, "window_hours": 48}})
