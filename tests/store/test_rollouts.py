"""Fleet rollouts in the store: recorded whole, saved on each phase change, started by one
applier, read back unfinished after a restart, and bad lines refused with nothing written."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from bot.errors import InputError, NotFound
from bot.store import (
    RolloutRecord,
    RolloutReplicaRecord,
    Store,
)
from bot.vocab import (
    OperationKind,
    ReplicaPhase,
    RolloutState,
)
from tests.store.conftest import table_counts
from tests.store.test_store import COMMAND, PLAN_48, SIZE_48

AT = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
LINES = (
    RolloutReplicaRecord("kimi-01", "http://10.0.0.11:30000", planned="ratio 4: 8 x 44.77 GB/rank",
                         old_config="size 20 GB/rank", new_config="ratio 4"),
    RolloutReplicaRecord("kimi-02", "http://10.0.0.12:30000", planned="ratio 4: 8 x 44.77 GB/rank",
                         old_config="size 20 GB/rank", new_config="ratio 4"),
)  # fmt: skip


def _proposed(store: Store, fleet: str = "prod") -> RolloutRecord:
    return store.record_rollout(
        fleet,
        OperationKind.RESIZE,
        "hicache ratio 4",
        LINES,
        proposed_by="U0BEN",
        state=RolloutState.PROPOSED,
        ratio=4.0,
        channel="C0OPS",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC),
        at=AT,
    )


def test_a_rollout_reads_back_with_its_lines_in_order(store: Store) -> None:
    """Every field written comes back, the replica lines in rollout order, nothing started."""
    record = _proposed(store)
    assert store.rollout(record.id) == record
    assert (record.fleet, record.kind, record.change, record.ratio) == (
        "prod", OperationKind.RESIZE, "hicache ratio 4", 4.0,
    )  # fmt: skip
    assert record.state is RolloutState.PROPOSED
    assert record.replicas == LINES
    assert (record.created_at, record.started_at, record.ended_at) == (AT, None, None)


def test_one_applier_starts_a_proposed_rollout(store: Store) -> None:
    """The first start moves it to running for its applier; a second reads who started it."""
    record = _proposed(store)
    later = datetime(2026, 11, 30, 14, 5, tzinfo=UTC)
    first = store.start_rollout(record.id, "U0ANA", later)
    second = store.start_rollout(record.id, "U0EVE", datetime(2026, 11, 30, 14, 6, tzinfo=UTC))
    assert (first.state, first.applied_by, first.started_at) == (
        RolloutState.RUNNING, "U0ANA", later,
    )  # fmt: skip
    assert second == first
    assert store.unfinished_rollouts() == [first]


def test_saved_progress_links_each_replica_to_its_agent_revision(store: Store) -> None:
    """Saving a view updates each line (phase, agent operation and revision, seconds) and ends
    the rollout once its state is final; the newest started rollout is the fleet's last."""
    record = _proposed(store)
    store.start_rollout(record.id, "U0ANA", AT)
    done = tuple(
        replace(line, phase=ReplicaPhase.DONE, operation_id=7 + n, revision=40 + n, seconds=31.5)
        for n, line in enumerate(LINES)
    )
    ended = datetime(2026, 11, 30, 14, 30, tzinfo=UTC)
    saved = store.save_rollout(record.id, RolloutState.DONE, done, at=ended)
    assert saved.replicas == done
    assert [(r.operation_id, r.revision) for r in saved.replicas] == [(7, 40), (8, 41)]
    assert (saved.state, saved.ended_at) == (RolloutState.DONE, ended)
    assert store.unfinished_rollouts() == []
    assert store.last_rollout("prod") == saved
    assert store.last_rollout("staging") is None


def test_a_proposal_finds_its_rollout(store: Store) -> None:
    """A replica line that names its proposal leads back to its rollout; a lone proposal to none."""
    proposals = [
        store.record_proposal(
            line.host, SIZE_48, PLAN_48, command_line=COMMAND, proposed_by="U0BEN",
            channel="C0OPS", expires_at=datetime(2030, 1, 1, tzinfo=UTC),
            fingerprint="sha256:feed", requested={"kind": "size", "value": 48},
        )
        for line in (*LINES, LINES[0])
    ]  # fmt: skip
    lines = tuple(
        replace(line, proposal_id=p.id) for line, p in zip(LINES, proposals, strict=False)
    )
    record = store.record_rollout(
        "prod", OperationKind.RESIZE, "hicache size 48", lines, proposed_by="U0BEN",
        state=RolloutState.PROPOSED, size_gb=48, at=AT,
    )  # fmt: skip
    assert store.rollout_by_proposal(proposals[1].id) == record
    assert store.rollout_by_proposal(proposals[2].id) is None


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ((), "a rollout needs at least one replica"),
        ((LINES[0], LINES[0]), "a rollout names a replica twice: kimi-01, kimi-01"),
        ((replace(LINES[0], phase="drifting"),), "replica phase 'drifting' is not known"),
        ((replace(LINES[0], seconds=float("nan")),), "replica seconds"),
    ],
)
def test_a_bad_rollout_is_refused_and_nothing_is_written(
    store: Store, lines: tuple[RolloutReplicaRecord, ...], message: str
) -> None:
    """Each bad line is refused naming the value, and no row of either table is written."""
    before = table_counts(store)
    with pytest.raises(InputError, match=message):
        store.record_rollout(
            "prod", OperationKind.RESTART, "restart", lines, proposed_by="U0ANA",
            state=RolloutState.RUNNING, at=AT,
        )  # fmt: skip
    assert table_counts(store) == before


def test_an_unknown_rollout_is_not_found(store: Store) -> None:
    """Reading, saving or starting a rollout id nobody recorded says so by its number."""
    with pytest.raises(NotFound, match="no rollout 9 is recorded"):
        store.rollout(9)
    with pytest.raises(NotFound, match="no rollout 9 is recorded"):
        store.start_rollout(9, "U0ANA", AT)


def test_a_replica_proposal_applied_by_a_rollout_is_not_an_unrecorded_apply(store: Store) -> None:
    """A fleet replica's applied proposal has its operation on the rollout's line, so a bot
    restart must not adopt it as a single host's apply; a plain applied proposal still is one."""

    def applied(host: str) -> int:
        proposal = store.record_proposal(
            host, SIZE_48, PLAN_48, proposed_by="U0BEN", channel="C0OPS",
            expires_at=datetime(2030, 1, 1, tzinfo=UTC), fingerprint="sha256:feed",
            requested={"kind": "size", "value": 48}, command_line=COMMAND,
        )  # fmt: skip
        store.record_apply(proposal.revision_id, "U0ANA", at=AT)
        return proposal.id

    replica_proposal, plain_proposal = applied("kimi-01"), applied("kimi-02")
    line = replace(LINES[0], proposal_id=replica_proposal)
    store.record_rollout(
        "prod", OperationKind.RESIZE, "hicache size 48", (line,), proposed_by="U0BEN",
        state=RolloutState.PROPOSED, size_gb=48, channel="C0OPS",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC), at=AT,
    )  # fmt: skip
    assert [p.id for p in store.applied_without_operation()] == [plain_proposal]


def test_a_cancelled_proposal_ends_its_rollout_cancelled_once(store: Store) -> None:
    """A proposed rollout cancelled ends cancelled with the reason and the time; cancelling a
    started one changes nothing."""
    record = _proposed(store)
    later = datetime(2026, 11, 30, 14, 5, tzinfo=UTC)
    cancelled = store.cancel_rollout(record.id, "cancelled by U0ANA", later)
    assert (cancelled.state, cancelled.reason, cancelled.ended_at) == (
        RolloutState.CANCELLED, "cancelled by U0ANA", later,
    )  # fmt: skip
    assert store.rollout(record.id) == cancelled
    assert store.start_rollout(record.id, "U0ANA", later).state is RolloutState.CANCELLED
    started = store.start_rollout(_proposed(store).id, "U0ANA", later)
    assert store.cancel_rollout(started.id, "cancelled by U0BEN", later) == started
    with pytest.raises(NotFound, match="no rollout 999 is recorded"):
        store.cancel_rollout(999, "cancelled by U0BEN", later)


def test_proposed_rollouts_past_their_expiry_end_cancelled_as_expired(store: Store) -> None:
    """Only proposed rollouts whose expires_at has passed end, saying they expired and when;
    one still open, one started and one already cancelled are left as they are."""
    due = _proposed(store)  # expires 2030-01-01 00:00
    started = store.start_rollout(_proposed(store).id, "U0ANA", AT)
    cancelled = store.cancel_rollout(_proposed(store).id, "cancelled by U0ANA", AT)
    assert store.expire_rollouts(datetime(2029, 12, 31, 23, 59, tzinfo=UTC)) == []
    now = datetime(2030, 1, 1, 0, 1, tzinfo=UTC)
    ended = store.expire_rollouts(now)
    assert [r.id for r in ended] == [due.id]
    assert ended[0].state is RolloutState.CANCELLED
    assert ended[0].reason == "expired at 2030-01-01 00:00 UTC before it was applied"
    assert ended[0].ended_at == now
    assert store.rollout(started.id) == started
    assert store.rollout(cancelled.id) == cancelled
    assert store.expire_rollouts(now) == []
