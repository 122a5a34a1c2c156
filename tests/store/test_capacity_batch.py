"""Capacity samples stored as a batch: one transaction, all or none, on a migrated database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.errors import InputError
from bot.store import CapacitySample, Store
from tests.store.conftest import table_counts

T0 = datetime(2026, 2, 24, 12, tzinfo=UTC)


def _sample(host: str, minutes: int, usage: float = 0.5) -> CapacitySample:
    return CapacitySample(
        host, T0 + timedelta(minutes=minutes), ram_total_bytes=449 * 10**9,
        ram_available_bytes=80 * 10**9, device_tokens=231_120, token_usage=usage,
        queued_requests=3, gpus=({"index": 0, "used_bytes": 94_510_000_000},),
    )  # fmt: skip


def test_a_batch_is_stored_and_read_back_per_host(store: Store) -> None:
    """Every sample of a batch over several hosts reads back intact under its own host."""
    batch = [_sample(f"kimi-{n:02d}", minutes) for minutes in (0, 5) for n in (1, 2, 3)]
    ids = store.add_capacity_samples(batch)
    assert len(set(ids)) == len(batch)
    for n in (1, 2, 3):
        host = f"kimi-{n:02d}"
        assert store.capacity_samples(host, T0) == [s for s in batch if s.host == host]


def test_an_empty_batch_stores_nothing(store: Store) -> None:
    """An empty batch returns no ids and leaves every table as it was."""
    before = table_counts(store)
    assert store.add_capacity_samples([]) == []
    assert table_counts(store) == before


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (CapacitySample("kimi-02", T0, token_usage=97.0), "token usage is 97.0"),
        ("kimi-02", "a capacity sample must be a CapacitySample, not str"),
    ],
    ids=["usage above 1", "not a sample"],
)
def test_a_bad_sample_in_the_batch_changes_nothing(
    store: Store, bad: CapacitySample, message: str
) -> None:
    """One bad sample among good ones raises its specific error and stores none of the batch."""
    store.add_capacity_samples([_sample("kimi-01", 0)])
    before = table_counts(store)
    with pytest.raises(InputError, match=message):
        store.add_capacity_samples([_sample("kimi-01", 5), bad, _sample("kimi-03", 5)])
    assert table_counts(store) == before
    assert store.capacity_samples("kimi-01", T0) == [_sample("kimi-01", 0)]


def test_samples_of_several_hosts_come_back_per_host_in_one_read(store: Store) -> None:
    """Each named host gets its own samples in [since, until), oldest first; a host with none
    gets an empty list and a host not named is left out."""
    batch = [_sample(f"kimi-{n:02d}", minutes) for minutes in (10, 0, 5, 15) for n in (1, 2, 3)]
    store.add_capacity_samples(batch)
    since, until = T0 + timedelta(minutes=5), T0 + timedelta(minutes=15)
    found = store.capacity_samples_of(["kimi-01", "kimi-02", "kimi-09"], since, until)
    assert sorted(found) == ["kimi-01", "kimi-02", "kimi-09"]
    for host in ("kimi-01", "kimi-02"):
        assert found[host] == [_sample(host, 5), _sample(host, 10)]
        assert found[host] == store.capacity_samples(host, since, until)
    assert found["kimi-09"] == []
