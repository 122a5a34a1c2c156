"""The report scheduler: APScheduler 3.x in the bot process, its jobs kept in the bot's database.

- report jobs (one per schedule in ``report_schedules``) live in APScheduler's SQLAlchemy job
  store (table ``apscheduler_jobs``, outside Alembic), so they survive a restart with their next
  run time; a run missed while the bot was down runs once on start (``coalesce``), within
  ``[reports] misfire_grace_minutes`` (APScheduler's 1 s default would drop it);
- the sampling job (every ``sample_every_minutes``, which also deletes the samples older than
  ``keep_days``) and the heartbeat live in memory;
- one scheduler per database: :meth:`ReportScheduler.start` takes the lease in the store
  (``scheduler_locks``) and a second process is refused
  (:class:`~bot.errors.SchedulerLocked`): run it with ``--no-scheduler``. The heartbeat renews
  the lease; a scheduler that finds its lease taken over stops itself rather than post twice.
  A lease whose owner was a process of this host that no longer exists (a bot killed by SIGKILL
  or the OOM killer gives nothing up) is taken over at once, so the bot's restart is not
  refused until the lease goes stale.

The heartbeat also reconciles the report jobs with the ``report_schedules`` table, so a schedule
made through a ``--no-scheduler`` bot is picked up within one heartbeat.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import uuid
from datetime import datetime

from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.background import BackgroundScheduler

from bot.chat.handler_context import Context
from bot.chat.memory_notices import MemoryNoticeDesk
from bot.chat.replies import ProblemReply, ReportPoster
from bot.chat.report_commands import capacity_report
from bot.clock import Clock, SystemClock
from bot.errors import KimiOpsError, NotFound
from bot.reports import Cadence, ReportSettings
from bot.reports.runtime import jobs
from bot.reports.runtime.desk import ReportDesk
from bot.reports.runtime.triggers import trigger_for
from bot.store import Store
from bot.store.migrate import FOREIGN_TABLES

__all__ = ["JOB_TABLE", "ReportScheduler", "report_job_id"]

log = logging.getLogger(__name__)

JOB_TABLE = "apscheduler_jobs"
assert JOB_TABLE in FOREIGN_TABLES  # Alembic's autogenerate must leave APScheduler's table alone
_REPORT_PREFIX = "report-"


def report_job_id(schedule_id: int) -> str:
    return f"{_REPORT_PREFIX}{schedule_id}"


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _dead_here(owner: str) -> bool:
    """Whether ``owner`` (``host:pid:nonce``) names a process of this host that is gone; any
    doubt (another host, a pid we may not signal, an owner of another shape) is no."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it exists, as another user
    return False


class ReportScheduler:
    """Samples capacity and posts scheduled reports; ``start`` then ``stop``."""

    def __init__(
        self,
        context: Context,
        desk: ReportDesk,
        poster: ReportPoster,
        store: Store,
        settings: ReportSettings,
        *,
        name: str = "reports",
        clock: Clock | None = None,
    ) -> None:
        self.context = context
        self.desk = desk
        self.poster = poster
        self.store = store
        self.settings = settings
        self.name = name
        self.owner = _owner()
        self._clock = clock or SystemClock()
        self.memory_notices = MemoryNoticeDesk(store, poster, self._clock)
        # Guards every call a job makes into the scheduler, and ``_closing``: APScheduler's
        # ``shutdown(wait=True)`` holds its job-store lock while it waits for running jobs, so a
        # job that reached for that lock during a shutdown would wait for ever (and the shutdown
        # with it). Once ``_closing`` is set under this lock, no job touches the scheduler again.
        self._sync_lock = threading.RLock()
        self._closing = False
        self._scheduler = BackgroundScheduler(
            jobstores={
                "default": SQLAlchemyJobStore(engine=store.engine, tablename=JOB_TABLE),
                "memory": MemoryJobStore(),
            },
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": settings.misfire_grace_minutes * 60,
            },
            timezone=settings.zone,
        )
        self.stopped = threading.Event()

    @property
    def running(self) -> bool:
        return bool(self._scheduler.running) and not self.stopped.is_set()

    def start(self) -> None:
        """Take the lease (or raise :class:`~bot.errors.SchedulerLocked`), load the stored jobs,
        add the sampling and heartbeat jobs, and start; missed reports run once now."""
        self._release_if_dead()
        self.store.acquire_scheduler_lock(
            self.name, self.owner, self._clock.now(), self.settings.lock_stale_seconds
        )
        jobs.register(self.name, self)
        # Paused first: the stored jobs must be reconciled with the schedules before any runs.
        self._scheduler.start(paused=True)
        self._scheduler.add_job(
            jobs.sample, "interval", args=(self.name,), id="sample", jobstore="memory",
            minutes=self.settings.sample_every_minutes, replace_existing=True,
        )  # fmt: skip
        self._scheduler.add_job(
            jobs.heartbeat, "interval", args=(self.name,), id="heartbeat", jobstore="memory",
            seconds=self.settings.heartbeat_seconds, replace_existing=True,
        )  # fmt: skip
        self.desk.on_schedules_changed = self.sync
        self.sync()
        self._scheduler.resume()

    def _release_if_dead(self) -> None:
        lease = self.store.scheduler_lease(self.name)
        if lease is not None and _dead_here(lease.owner):
            log.warning("taking over the report scheduler of %s, which no longer runs", lease.owner)
            self.store.release_scheduler_lock(self.name, lease.owner)

    def stop(self) -> None:
        """Stop the jobs (waiting for a running one) and give the lease up."""
        self.desk.on_schedules_changed = None
        with self._sync_lock:
            self._closing = True
        # The heartbeat may have stopped it meanwhile (lease lost): nothing left to shut down.
        if self._scheduler.running:
            with contextlib.suppress(SchedulerNotRunningError):
                self._scheduler.shutdown(wait=True)
        self.stopped.set()
        jobs.forget(self.name, self)
        self.store.release_scheduler_lock(self.name, self.owner)

    def sync(self) -> None:
        """Make the stored report jobs match the enabled schedules: add the new, drop the gone."""
        with self._sync_lock:
            if self._closing or self.stopped.is_set():
                return
            wanted = {report_job_id(s.id): s for s in self.store.schedules(enabled_only=True)}
            have = {job.id for job in self._scheduler.get_jobs(jobstore="default")}
            for job_id in have - set(wanted):
                if job_id.startswith(_REPORT_PREFIX):
                    self._scheduler.remove_job(job_id, jobstore="default")
            for job_id, schedule in wanted.items():
                if job_id in have:
                    continue
                cadence = Cadence.parse(schedule.cadence)
                trigger = trigger_for(cadence, self.settings.zone, schedule.next_run_at)
                self._scheduler.add_job(
                    jobs.report, trigger, args=(self.name, schedule.id), id=job_id,
                    jobstore="default", next_run_time=schedule.next_run_at,
                )  # fmt: skip

    # -- the jobs' work (called through bot.reports.runtime.jobs) ---------------------------

    def run_sample(self) -> None:
        """Store every host's sample, post the agents' new memory notices, then delete samples
        older than ``[reports] keep_days``."""
        reports = self.desk.gather(self.desk.host_names)
        try:
            self.memory_notices.post_new(reports)
        except KimiOpsError:  # the store's answer: the samples are kept all the same
            log.exception("memory notices not posted")
        self.desk.forget_old_samples()

    def run_report(self, schedule_id: int) -> None:
        try:
            schedule = self.store.schedule(schedule_id)
        except NotFound:
            self.sync()
            return
        if not schedule.enabled:
            return
        context = dataclasses.replace(self.context, channel=schedule.channel)
        try:
            reply = capacity_report(context, schedule.host, schedule)
        except KimiOpsError as exc:  # the store or a host's answer: say so where it was due
            log.exception("scheduled report %s failed", schedule_id)
            reply = ProblemReply(f"the scheduled capacity report could not be made: {exc}")
        self.poster.post(schedule.channel, reply)
        with self._sync_lock:
            if self._closing:
                return
            job = self._scheduler.get_job(report_job_id(schedule_id), jobstore="default")
        if job is not None and job.next_run_time is not None:
            self.store.update_schedule(schedule_id, next_run_at=job.next_run_time)

    def run_heartbeat(self) -> None:
        now = self._clock.now()
        if not self.store.heartbeat_scheduler_lock(self.name, self.owner, now):
            log.error(
                "the report scheduler's lease on %s was taken over; stopping this scheduler",
                self.store.url,
            )
            with self._sync_lock:
                if self._closing:
                    return
                self._closing = True
            self.stopped.set()
            self._scheduler.shutdown(wait=False)
            jobs.forget(self.name, self)
            return
        self.sync()

    def report_jobs(self) -> dict[str, datetime | None]:
        """The stored report jobs: id -> next run time (None: paused)."""
        return {job.id: job.next_run_time for job in self._scheduler.get_jobs(jobstore="default")}
