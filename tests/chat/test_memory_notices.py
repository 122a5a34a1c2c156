"""The agents' memory notices posted once each, in the channel of the host's last operation
(a real SQLite store, a recording poster, reports as the scheduler's sampling turn builds them
from the agent's status JSON)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.agent_json import AgentStatus
from bot.chat.memory_notices import MemoryNoticeDesk
from bot.chat.replies import MemoryNoticeReply, Reply
from bot.reports import HostReport, LastOperation
from bot.store import Store
from bot.vocab import OperationKind, OperationState
from tests.chat._core_fixtures import migrated_store

T0 = datetime(2026, 2, 24, 11, 0, tzinfo=UTC)


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        pass


class RecordingPoster:
    def __init__(self) -> None:
        self.posts: list[tuple[str, Reply]] = []

    def post(self, channel: str, reply: Reply) -> None:
        self.posts.append((channel, reply))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with migrated_store(tmp_path) as the_store:
        yield the_store


def notice(seq: int, minutes: float, headroom: float = 8.2) -> dict[str, Any]:
    return {
        "seq": seq,
        "at": (T0 + timedelta(minutes=minutes)).isoformat(),
        "server_pid": 4242,
        "where": "host",
        "headroom_gb": headroom,
        "available_gb": headroom,
        "cgroup_limit_gb": None,
        "floor_gb": 10.74,
        "message": f"after ready: host RAM available fell to {headroom:.1f} GB, below ...",
    }


def report(notices: list[dict[str, Any]], last_op: int | None = 7) -> HostReport:
    """The report of kimi-01 whose agent lists ``notices``, as the sampling turn builds it."""
    status = AgentStatus.from_json(
        {
            "host": {"name": "kimi-01"},
            "server": {"state": "running"},
            "fingerprint": "f",
            "memory_watch": {"below_floor": True, "notices": notices},
        }
    )
    last = None if last_op is None else LastOperation(last_op, "resize", "ready", "ana", T0)
    return HostReport(
        host="kimi-01",
        at=T0 + timedelta(hours=1),
        server_state="running",
        last_operation=last,
        memory_notices=status.memory.notices,
        memory_below_floor=status.memory.below_floor,
    )


def test_each_notice_is_posted_once_in_the_last_operations_channel(store: Store) -> None:
    """Two sampling turns list notice 1, then 1 and 2: one post each, in the channel where the
    host's last operation was posted, naming that operation."""
    record = store.record_operation(
        "kimi-01", 7, OperationKind.RESIZE, state=OperationState.READY, channel="C0OPS"
    )
    poster = RecordingPoster()
    desk = MemoryNoticeDesk(store, poster, FixedClock(T0))
    first = desk.post_new([report([notice(1, 5)])])
    second = desk.post_new([report([notice(1, 5), notice(2, 9, 9.0)])])
    third = desk.post_new([report([notice(1, 5), notice(2, 9, 9.0)])])
    assert [r.notice.seq for r in first] == [1]
    assert [r.notice.seq for r in second] == [2]
    assert third == []
    assert [channel for channel, _ in poster.posts] == ["C0OPS", "C0OPS"]
    posted = poster.posts[1][1]
    assert isinstance(posted, MemoryNoticeReply)
    assert (posted.host, posted.operation_id, posted.notice.headroom_gb) == (
        "kimi-01",
        record.id,
        9.0,
    )


def test_notices_from_before_the_bot_started_are_left_to_the_report(store: Store) -> None:
    """A notice older than the bot's start (a restarted bot) is not posted again."""
    store.record_operation("kimi-01", 7, OperationKind.RESIZE, channel="C0OPS")
    poster = RecordingPoster()
    desk = MemoryNoticeDesk(store, poster, FixedClock(T0 + timedelta(minutes=6)))
    assert [r.notice.seq for r in desk.post_new([report([notice(1, 5), notice(2, 9)])])] == [2]


def test_a_host_without_a_posted_operation_gets_no_post(store: Store) -> None:
    """No last operation, or one the store has no channel for: nothing is posted."""
    store.record_operation("kimi-01", 7, OperationKind.RESIZE, channel=None)
    poster = RecordingPoster()
    desk = MemoryNoticeDesk(store, poster, FixedClock(T0))
    assert desk.post_new([report([notice(1, 5)], last_op=None)]) == []
    assert desk.post_new([report([notice(2, 6)], last_op=7)]) == []
    assert poster.posts == []


def test_an_agent_counting_afresh_is_posted_again(store: Store) -> None:
    """An agent that lost its notices numbers from 1 again: a new time makes a new notice."""
    store.record_operation("kimi-01", 7, OperationKind.RESIZE, channel="C0OPS")
    poster = RecordingPoster()
    desk = MemoryNoticeDesk(store, poster, FixedClock(T0))
    desk.post_new([report([notice(1, 5)])])
    assert [r.notice.at for r in desk.post_new([report([notice(1, 30)])])] == [
        T0 + timedelta(minutes=30)
    ]
