"""The report scheduler's lease: one bot process per database runs the scheduler.

A second process that starts its scheduler while the first still heartbeats is refused
(:class:`~bot.errors.SchedulerLocked`), so no report is posted twice. A lease whose heartbeat is
older than ``stale_after_s`` belonged to a process that died without releasing it: it is taken
over. All decisions use the times the caller passes (its clock), so they can be tested without
waiting.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from bot.errors import SchedulerLocked
from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._models import SchedulerLockRow
from bot.store.records import SchedulerLease

__all__ = ["SchedulerLockMixin"]

_NAME, _OWNER = 64, 255


def _lease(row: SchedulerLockRow) -> SchedulerLease:
    return SchedulerLease(row.name, row.owner, row.acquired_at, row.heartbeat_at)


def _row(session: Session, name: str) -> SchedulerLockRow | None:
    return session.get(SchedulerLockRow, name)


class SchedulerLockMixin(StoreBase):
    def acquire_scheduler_lock(
        self, name: str, owner: str, now: datetime, stale_after_s: float
    ) -> SchedulerLease:
        """Take the lease ``name`` for ``owner``, or raise :class:`SchedulerLocked` when another
        owner heartbeat within ``stale_after_s`` of ``now``."""
        key, who = v.text("scheduler name", name, _NAME), v.text("scheduler owner", owner, _OWNER)
        at = v.instant("now", now)
        with self._write("take the report scheduler's lease") as session:
            row = _row(session, key)
            if row is None:
                row = SchedulerLockRow(name=key, owner=who, acquired_at=at, heartbeat_at=at)
                session.add(row)
            elif row.owner != who and at - row.heartbeat_at < timedelta(seconds=stale_after_s):
                raise SchedulerLocked(
                    f"another kimi-ops bot ({row.owner}) runs the report scheduler on this "
                    f"database (last heartbeat {row.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC); run this "
                    "one with --no-scheduler, or stop the other",
                    row.owner,
                )
            else:
                row.owner, row.acquired_at, row.heartbeat_at = who, at, at
            session.flush()
            return _lease(row)

    def heartbeat_scheduler_lock(self, name: str, owner: str, now: datetime) -> bool:
        """Renew ``owner``'s lease; False when it is no longer ``owner``'s (taken over)."""
        at = v.instant("now", now)
        with self._write("renew the report scheduler's lease") as session:
            row = _row(session, v.text("scheduler name", name, _NAME))
            if row is None or row.owner != owner:
                return False
            row.heartbeat_at = at
            return True

    def release_scheduler_lock(self, name: str, owner: str) -> None:
        """Give the lease up (only ``owner``'s own)."""
        with self._write("release the report scheduler's lease") as session:
            row = _row(session, v.text("scheduler name", name, _NAME))
            if row is not None and row.owner == owner:
                session.delete(row)

    def scheduler_lease(self, name: str) -> SchedulerLease | None:
        with self._read("read the report scheduler's lease") as session:
            row = _row(session, v.text("scheduler name", name, _NAME))
            return None if row is None else _lease(row)
