"""The report scheduler: APScheduler with its jobs in a real SQLite store (through Alembic).

APScheduler 3.x reads the system clock itself, so these tests move its stored next-run times
rather than the clock; the lease's decisions take the scheduler's injected clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from bot.chat.core import ChatCore
from bot.chat.policy import Actor
from bot.chat.replies import Reply, ReportReply
from bot.errors import SchedulerLocked
from bot.reports import ReportSettings
from bot.reports.runtime import JOB_TABLE, ReportDesk, ReportScheduler, attach_reports
from bot.store import Store
from tests.chat._core_fixtures import RecordingFrontEnd, chat_settings, running_core
from tests.chat.conftest import free_port
from tests.reports._fixtures import RecordingPoster

ANA = Actor("ana")
SETTINGS = ReportSettings(sample_every_minutes=60, heartbeat_seconds=1, lock_stale_seconds=3)


@contextmanager
def bot_process(store: Store) -> Iterator[tuple[ChatCore, ReportDesk]]:
    """A bot's core and desk over one host whose agent does not answer."""
    hosts = {"kimi-02": f"http://127.0.0.1:{free_port()}"}
    with running_core(chat_settings(hosts), store, RecordingFrontEnd()) as core:
        yield core, attach_reports(core, store, SETTINGS)


@contextmanager
def scheduler_of(
    core: ChatCore, desk: ReportDesk, store: Store, poster: RecordingPoster
) -> Iterator[ReportScheduler]:
    scheduler = ReportScheduler(core.context, desk, poster, store, SETTINGS)
    scheduler.start()
    try:
        yield scheduler
    finally:
        if not scheduler.stopped.is_set():
            scheduler.stop()


def _move_next_run(store: Store, job_id: str, when: datetime) -> None:
    """What a bot that was down sees: the stored job's next run time is in the past."""
    jobstore = SQLAlchemyJobStore(engine=store.engine, tablename=JOB_TABLE)
    jobstore.start(BackgroundScheduler(), "default")
    job = jobstore.lookup_job(job_id)
    assert job is not None
    job.next_run_time = when
    jobstore.update_job(job)


def _wait(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Whether ``condition`` became true within ``timeout_s`` (polled)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_schedules_survive_a_restart_of_the_scheduler(store: Store) -> None:
    """A schedule made through the core is a stored job; a new scheduler on the same database
    finds it with the same next run, and posts nothing before it is due."""
    poster = RecordingPoster()
    with bot_process(store) as (core, desk):
        with scheduler_of(core, desk, store, poster) as first:
            core.handle("report every 6h", ANA)
            before = first.report_jobs()
        with scheduler_of(core, desk, store, poster) as second:
            after = second.report_jobs()
    [schedule] = store.schedules()
    assert list(before) == [f"report-{schedule.id}"]
    assert after == before
    assert poster.posts == []


def test_a_report_missed_while_the_bot_was_down_runs_once_and_says_the_agent_is_down(
    store: Store,
) -> None:
    """Three runs missed (next run 13 h ago, every 6 h): exactly one report is posted on start,
    listing the silent host; the scheduler keeps running with the next run in the future."""
    poster = RecordingPoster()
    with bot_process(store) as (core, desk):
        with scheduler_of(core, desk, store, poster):
            core.handle("report every 6h", ANA)
        [schedule] = store.schedules()
        job_id = f"report-{schedule.id}"
        _move_next_run(store, job_id, datetime.now(UTC) - timedelta(hours=13))
        with scheduler_of(core, desk, store, poster) as restarted:
            assert poster.posted.wait(20), "the missed report did not run"
            assert not _wait(lambda: len(poster.posts) > 1, timeout_s=2.0)
            assert restarted.running
            next_run = restarted.report_jobs()[job_id]
    [(channel, reply)] = poster.posts
    assert channel == "terminal"
    assert isinstance(reply, ReportReply)
    assert reply.schedule is not None
    assert reply.schedule.id == schedule.id
    [view] = reply.hosts
    assert view.report.host == "kimi-02"
    assert not view.report.answered
    assert next_run is not None
    assert next_run > datetime.now(UTC)
    assert store.schedule(schedule.id).next_run_at == next_run


def test_a_second_scheduler_on_the_database_is_refused_until_the_first_stops(
    store: Store,
) -> None:
    """While one scheduler runs, another's start raises SchedulerLocked and changes nothing;
    once the first stops, the second starts."""
    poster = RecordingPoster()
    with bot_process(store) as (core, desk):
        with scheduler_of(core, desk, store, poster) as first:
            second = ReportScheduler(core.context, desk, poster, store, SETTINGS)
            with pytest.raises(SchedulerLocked, match="--no-scheduler"):
                second.start()
            assert first.running
            lease = store.scheduler_lease("reports")
            assert lease is not None
            assert lease.owner == first.owner
        second.start()
        try:
            assert second.running
        finally:
            second.stop()


def test_a_schedule_made_by_a_bot_without_scheduler_is_picked_up_at_the_heartbeat(
    store: Store,
) -> None:
    """A --no-scheduler bot only writes the schedule; the running scheduler adds its job within
    a heartbeat (1 s here)."""
    poster = RecordingPoster()
    with bot_process(store) as (core, desk), scheduler_of(core, desk, store, poster) as running:
        with bot_process(store) as (other_core, _other_desk):
            other_core.handle("report daily 09:00", ANA)
        [schedule] = store.schedules()
        assert _wait(lambda: f"report-{schedule.id}" in running.report_jobs())


def test_a_scheduler_whose_lease_was_taken_over_stops_itself(store: Store) -> None:
    """If another process took the lease (this one looked dead), the next heartbeat stops this
    scheduler rather than let both post."""
    poster = RecordingPoster()
    with bot_process(store) as (core, desk), scheduler_of(core, desk, store, poster) as running:
        later = datetime.now(UTC) + timedelta(seconds=SETTINGS.lock_stale_seconds + 60)
        store.acquire_scheduler_lock("reports", "another-bot", later, SETTINGS.lock_stale_seconds)
        assert running.stopped.wait(10)
        lease = store.scheduler_lease("reports")
        assert lease is not None
        assert lease.owner == "another-bot"


@dataclass
class HeldPoster(RecordingPoster):
    """A poster that holds each post until ``release`` is set: a report still running when the
    bot is asked to stop."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def post(self, channel: str, reply: Reply) -> None:
        self.entered.set()
        self.release.wait(60)
        super().post(channel, reply)


def test_stopping_while_a_report_is_being_posted_finishes_and_posts_it_once(store: Store) -> None:
    """A report job still posting when the scheduler stops finishes its post, and the stop
    returns: APScheduler's shutdown waits for running jobs while holding its job-store lock, so a
    job that reached into the scheduler afterwards used to hang the stop for ever."""
    poster = HeldPoster()
    with bot_process(store) as (core, desk):
        with scheduler_of(core, desk, store, RecordingPoster()):
            core.handle("report every 6h", ANA)
        [schedule] = store.schedules()
        _move_next_run(store, f"report-{schedule.id}", datetime.now(UTC) - timedelta(hours=13))
        scheduler = ReportScheduler(core.context, desk, poster, store, SETTINGS)
        scheduler.start()
        assert poster.entered.wait(20), "the missed report did not run"
        stopping = threading.Thread(target=scheduler.stop, daemon=True)
        stopping.start()
        # Let the stop reach APScheduler's shutdown (it waits for the held job) before the job
        # goes on to ask the scheduler for its next run time.
        time.sleep(1.0)
        poster.release.set()
        stopping.join(30)
        assert not stopping.is_alive(), "the scheduler's stop hung on the running report job"
    assert len(poster.posts) == 1
    assert scheduler.stopped.is_set()
    # The lease was given up: another bot may take it at once.
    store.acquire_scheduler_lock("reports", "another-bot", datetime.now(UTC), 3600)
