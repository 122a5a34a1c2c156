"""The scheduler's lease in the store: one scheduler per database, decided on the caller's times."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.errors import InputError, SchedulerLocked
from bot.store import Store
from tests.reports._fixtures import T0

STALE_S = 120


def test_a_second_owner_is_refused_while_the_first_heartbeats(store: Store) -> None:
    """Within the stale time a second owner gets SchedulerLocked naming the first; the lease
    stays the first's."""
    store.acquire_scheduler_lock("reports", "bot-a", T0, STALE_S)
    assert store.heartbeat_scheduler_lock("reports", "bot-a", T0 + timedelta(seconds=100))
    later = T0 + timedelta(seconds=100 + STALE_S - 1)
    with pytest.raises(SchedulerLocked, match="bot-a") as refused:
        store.acquire_scheduler_lock("reports", "bot-b", later, STALE_S)
    assert refused.value.owner == "bot-a"
    lease = store.scheduler_lease("reports")
    assert lease is not None
    assert (lease.owner, lease.heartbeat_at) == ("bot-a", T0 + timedelta(seconds=100))


def test_a_lease_without_heartbeat_is_taken_over_and_its_owner_learns_it(store: Store) -> None:
    """Past the stale time the lease passes to the new owner; the old owner's next heartbeat
    returns False (it must stop), and its release leaves the new owner's lease alone."""
    store.acquire_scheduler_lock("reports", "bot-a", T0, STALE_S)
    takeover = T0 + timedelta(seconds=STALE_S)
    assert store.acquire_scheduler_lock("reports", "bot-b", takeover, STALE_S).owner == "bot-b"
    assert not store.heartbeat_scheduler_lock("reports", "bot-a", takeover)
    store.release_scheduler_lock("reports", "bot-a")
    lease = store.scheduler_lease("reports")
    assert lease is not None
    assert lease.owner == "bot-b"


def test_a_released_lease_is_free_at_once(store: Store) -> None:
    """After its owner releases it, another owner takes the lease with no wait."""
    store.acquire_scheduler_lock("reports", "bot-a", T0, STALE_S)
    store.release_scheduler_lock("reports", "bot-a")
    assert store.scheduler_lease("reports") is None
    assert store.acquire_scheduler_lock("reports", "bot-b", T0, STALE_S).owner == "bot-b"


def test_a_naive_time_is_refused_and_nothing_is_written(store: Store) -> None:
    """A time without a zone is an InputError, and no lease appears."""
    with pytest.raises(InputError):
        store.acquire_scheduler_lock("reports", "bot-a", T0.replace(tzinfo=None), STALE_S)
    assert store.scheduler_lease("reports") is None
