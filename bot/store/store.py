"""The :class:`Store`: every read and write of kimi-ops' database, one method each.

Create one per process from a URL and share it between threads: it holds the engine (a pool of
connections) and hands each call its own session and transaction. Methods take and return plain
values and the frozen records of :mod:`bot.store.records`; bad input raises
:class:`~bot.errors.InputError` (or :class:`~bot.errors.NotFound`) before anything is written,
and a database failure raises :class:`~bot.errors.StoreError` with the transaction rolled back.
The schema must be at the newest migration (:func:`bot.store.upgrade_to_head`).
"""

from __future__ import annotations

from bot.store._capacity import CapacityMixin
from bot.store._operations import OperationsMixin
from bot.store._proposals import ProposalsMixin
from bot.store._refusals import RefusalsMixin
from bot.store._revision_reads import RevisionReadsMixin
from bot.store._revisions import RevisionsMixin
from bot.store._rollouts import RolloutsMixin
from bot.store._scheduler_lock import SchedulerLockMixin

__all__ = ["Store"]


class Store(
    RevisionsMixin,
    RevisionReadsMixin,
    ProposalsMixin,
    OperationsMixin,
    RefusalsMixin,
    CapacityMixin,
    SchedulerLockMixin,
    RolloutsMixin,
):
    """Repository of revisions, proposals, operations, refusals, capacity samples, schedules
    and fleet rollouts."""

    def __enter__(self) -> Store:
        return self
