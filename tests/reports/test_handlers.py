"""The core's report commands, through ChatCore.handle, on a real store and real agents."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from bot.chat.core import ChatCore
from bot.chat.policy import Actor
from bot.chat.replies import (
    HelpReply,
    ProblemReply,
    RefusalReply,
    ReportReply,
    ReportScheduledReply,
    ReportSchedulesReply,
    ReportStoppedReply,
    UsageReply,
)
from bot.chat.report_commands import REPORTS_PROPOSER
from bot.reports import CHART_PX, ReportSettings
from bot.reports.runtime import attach_reports
from bot.slack import report_messages
from bot.store import Store
from tests.chat._core_fixtures import RecordingFrontEnd, chat_settings, running_core
from tests.chat.conftest import RunningAgent, free_port
from tests.reports._fixtures import T0, SetClock, series

ANA, EVE = Actor("ana"), Actor("eve")  # ana is an applier, eve is not


@contextmanager
def core_for(
    hosts: dict[str, str], store: Store, clock: SetClock, reporter: bool = True
) -> Iterator[ChatCore]:
    front = RecordingFrontEnd()
    with running_core(chat_settings(hosts), store, front, clock=clock) as core:
        if reporter:
            attach_reports(core, store, ReportSettings())
        yield core


def _dead() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_scheduling_needs_an_applier_and_records_nothing_otherwise(store: Store) -> None:
    """eve may not schedule: refused, recorded as a refusal, no schedule stored."""
    with core_for({"kimi-01": _dead()}, store, SetClock()) as core:
        reply = core.handle("report every 6h", EVE)
    assert isinstance(reply, RefusalReply)
    assert store.schedules() == []


def test_every_6h_is_stored_with_its_first_run_an_interval_on(store: Store) -> None:
    """'report every 6h' stores cadence 'every 21600s' in this channel, first run now + 6 h."""
    with core_for({"kimi-01": _dead()}, store, SetClock()) as core:
        reply = core.handle("report every 6h", ANA)
    assert isinstance(reply, ReportScheduledReply)
    assert reply.cadence == "every 6h"
    [stored] = store.schedules()
    assert (stored.cadence, stored.channel) == ("every 21600s", "terminal")
    assert stored.created_by == "ana"
    assert stored.next_run_at == T0 + timedelta(hours=6)


def test_a_second_schedule_is_added_beside_the_first_and_both_are_listed(store: Store) -> None:
    """'every 1h' then 'daily 09:00' are two schedules with two numbers, both listed (T0 is
    06:00 UTC). Failed before the fix: both answered 'schedule #1', the first silently gone."""
    with core_for({"kimi-01": _dead()}, store, SetClock()) as core:
        hourly = core.handle("report every 1h", ANA)
        daily = core.handle("report daily 09:00", ANA)
        listed = core.handle("report schedules", EVE)
    assert isinstance(hourly, ReportScheduledReply)
    assert isinstance(daily, ReportScheduledReply)
    assert hourly.schedule.id != daily.schedule.id
    assert isinstance(listed, ReportSchedulesReply)
    assert listed.cadences == ("every 1h", "daily 09:00")
    assert [s.next_run_at for s in listed.schedules] == [
        T0 + timedelta(hours=1),
        T0.replace(hour=9),
    ]


def test_off_with_a_number_stops_that_schedule_only(store: Store) -> None:
    """'report off N' deletes schedule N and keeps the channel's others; an N that is not one
    of them is a problem that deletes nothing."""
    with core_for({"kimi-01": _dead()}, store, SetClock()) as core:
        hourly = core.handle("report every 1h", ANA)
        daily = core.handle("report daily 09:00", ANA)
        assert isinstance(hourly, ReportScheduledReply)
        assert isinstance(daily, ReportScheduledReply)
        stopped = core.handle(f"report off {hourly.schedule.id}", ANA)
        unknown = core.handle("report off 99", ANA)
    assert isinstance(stopped, ReportStoppedReply)
    assert [s.id for s in stopped.stopped] == [hourly.schedule.id]
    assert isinstance(unknown, ProblemReply)
    assert unknown.text == (
        "there is no report schedule #99 in terminal; 'report schedules' lists them"
    )
    assert [s.id for s in store.schedules()] == [daily.schedule.id]


def test_off_stops_the_channels_schedules(store: Store) -> None:
    """'report off' deletes every one of them and says which; a second 'off' finds none."""
    with core_for({"kimi-01": _dead()}, store, SetClock()) as core:
        core.handle("report every 6h", ANA)
        core.handle("report daily 09:00", ANA)
        stopped = core.handle("report off", ANA)
        again = core.handle("report off", ANA)
    assert isinstance(stopped, ReportStoppedReply)
    assert len(stopped.stopped) == 2
    assert isinstance(again, ReportStoppedReply)
    assert again.stopped == ()
    assert store.schedules() == []


def test_a_bad_interval_is_a_usage_error_and_stores_nothing(store: Store) -> None:
    """'every 2m' is below the 5 minute floor: usage, nothing stored."""
    with core_for({"kimi-01": _dead()}, store, SetClock()) as core:
        reply = core.handle("report every 2m", ANA)
    assert isinstance(reply, UsageReply)
    assert store.schedules() == []


def test_without_a_reporter_the_commands_say_so(store: Store) -> None:
    """A core with no reporter attached answers every report command with a problem."""
    with core_for({"kimi-01": _dead()}, store, SetClock(), reporter=False) as core:
        replies = [core.handle(text, ANA) for text in ("report", "report every 6h", "report off")]
    assert all(isinstance(r, ProblemReply) for r in replies)


def test_help_says_the_zone_report_daily_is_read_in(store: Store) -> None:
    """With [reports] timezone Europe/Paris, help describes 'report daily 09:30' at 09:30
    Europe/Paris; without reports set up, at 09:30 UTC; neither line says the other zone."""
    hosts = {"kimi-01": _dead()}
    with running_core(chat_settings(hosts), store, RecordingFrontEnd(), clock=SetClock()) as core:
        attach_reports(core, store, ReportSettings(timezone="Europe/Paris"))
        paris = core.handle("help", ANA)
    with core_for(hosts, store, SetClock(), reporter=False) as core:
        plain = core.handle("help", ANA)
    assert isinstance(paris, HelpReply)
    assert isinstance(plain, HelpReply)
    (daily,) = [line for line in paris.lines if "report daily 09:30" in line]
    assert daily.endswith("every day at 09:30 Europe/Paris")
    (utc,) = [line for line in plain.lines if "report daily 09:30" in line]
    assert utc.endswith("every day at 09:30 UTC")


def test_help_in_a_process_without_reports_says_the_configured_zone(store: Store) -> None:
    """A terminal runs no report desk; with [reports] timezone Europe/Paris in its config its
    help still reads 'report daily 09:30' in Europe/Paris. Failed before the fix: 09:30 UTC."""
    settings = dataclasses.replace(chat_settings({"kimi-01": _dead()}), timezone="Europe/Paris")
    with running_core(settings, store, RecordingFrontEnd(), clock=SetClock()) as core:
        reply = core.handle("help", ANA)
    assert isinstance(reply, HelpReply)
    (daily,) = [line for line in reply.lines if "report daily 09:30" in line]
    assert daily.endswith("every day at 09:30 Europe/Paris")


def test_a_host_that_does_not_answer_is_charted_from_its_stored_samples(store: Store) -> None:
    """The samples stored while kimi-02 answered still draw its chart when it is down; it gets
    no advice. Failed before the fix: no chart for a host that did not answer."""
    clock = SetClock(T0 + timedelta(hours=2))
    for sample in series("kimi-02", clock.now() - timedelta(hours=1), 7, usage=0.5, queued=0):
        store.add_capacity_sample(sample)
    with core_for({"kimi-02": _dead()}, store, clock) as core:
        reply = core.handle("report", ANA)
    assert isinstance(reply, ReportReply)
    [view] = reply.hosts
    assert not view.report.answered
    assert view.chart is not None
    assert view.chart.alt.startswith("Capacity of kimi-02: 7 samples")
    assert view.chart.png.startswith(b"\x89PNG")
    assert view.proposal is None


def test_the_chart_is_drawn_in_the_configured_zone_under_the_title_it_is_uploaded_with(
    store: Store,
) -> None:
    """With [reports] timezone Europe/Paris the chart of a report at 08:00 UTC is named and
    drawn at 09:00 Europe/Paris, and its title is the one Slack's upload carries. Failed before
    the fix: UTC times, and the upload said 'last 24 h' over a chart of 30 minutes."""
    clock = SetClock(T0 + timedelta(hours=2))
    for sample in series("kimi-02", clock.now(), 7, usage=0.5, queued=0):
        store.add_capacity_sample(sample)
    hosts = {"kimi-02": _dead()}
    with running_core(chat_settings(hosts), store, RecordingFrontEnd(), clock=clock) as core:
        attach_reports(core, store, ReportSettings(timezone="Europe/Paris"))
        reply = core.handle("report", ANA)
    assert isinstance(reply, ReportReply)
    [view] = reply.hosts
    assert view.chart is not None
    assert view.chart.filename == "kimi-02-capacity-20261130-0900.png"
    assert view.chart.title == "kimi-02: capacity, last 30 min"
    assert report_messages.chart_title(view) == view.chart.title


def test_an_agent_that_does_not_answer_is_listed_as_unreachable(store: Store) -> None:
    """The report lists the silent host with its problem; no samples: no chart, none stored."""
    with core_for({"kimi-02": _dead()}, store, SetClock()) as core:
        reply = core.handle("report", ANA)
    assert isinstance(reply, ReportReply)
    [view] = reply.hosts
    assert not view.report.answered
    assert view.report.problem
    assert view.chart is None
    assert store.capacity_samples("kimi-02", T0 - timedelta(days=1)) == []


@pytest.mark.slow
def test_a_report_of_a_live_host_has_its_figures_a_chart_and_a_sample(
    kimi: RunningAgent, store: Store
) -> None:
    """The simulated host's RAM, tokens and setting; a PNG of CHART_PX; one sample stored."""
    clock = SetClock()
    with core_for({"kimi-01": kimi.url}, store, clock) as core:
        reply = core.handle("report kimi-01", EVE)
    assert isinstance(reply, ReportReply)
    [view] = reply.hosts
    report = view.report
    assert report.answered, report.problem
    assert report.ram_total_gb == pytest.approx(449.0, abs=1)
    assert report.setting is not None
    assert "ratio 2" in report.setting
    assert report.ranks == 8
    assert report.device_tokens
    assert view.chart is not None
    assert view.chart.size_px == CHART_PX
    assert view.proposal is None  # one sample, no /metrics: no evidence
    [sample] = store.capacity_samples("kimi-01", T0 - timedelta(days=1))
    assert sample.at == T0


@pytest.mark.slow
def test_samples_calling_for_growth_become_a_proposal_anyone_can_apply(
    kimi: RunningAgent, store: Store
) -> None:
    """Stored samples of a queue at high usage: the report records a fitting proposal by
    kimi-ops, which the audit holds like any resize proposal."""
    clock = SetClock(T0 + timedelta(hours=2))
    for sample in series("kimi-01", clock.now() - timedelta(minutes=1), 7, usage=0.97, queued=80):
        store.add_capacity_sample(sample)
    with core_for({"kimi-01": kimi.url}, store, clock) as core:
        reply = core.handle("report", EVE)
        assert isinstance(reply, ReportReply)
        [view] = reply.hosts
        assert view.proposal is not None, view
        assert view.proposal.plan.fits
        assert view.proposal.proposed_by == REPORTS_PROPOSER
        assert view.evidence is not None
        terms = core.context.audit.proposal(view.proposal.id)
    assert terms.host == "kimi-01"
    assert terms.ratio == view.proposal.plan.ratio
