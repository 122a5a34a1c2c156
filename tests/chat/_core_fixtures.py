"""A real store (SQLite through Alembic) and a front end that records what the core hands it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bot.chat.agent_client import revisions_source
from bot.chat.audit import Watch
from bot.chat.config import ChatSettings, HostSettings, PolicySettings
from bot.chat.core import ChatCore, build_core
from bot.chat.policy import Actor
from bot.chat.progress import ProgressView
from bot.chat.replies import OperationReply, ProposalReply, Reply
from bot.chat.store_audit import StoreAudit
from bot.store import Store
from tests._store_template import migrated_sqlite
from tests.chat.conftest import TOKEN, TOKEN_ENV


@dataclass
class RecordingFrontEnd:
    """Keeps every reply, progress view, notice and unreachable report, in order."""

    replies: list[tuple[str, Reply]] = field(default_factory=list)
    views: list[tuple[Watch, ProgressView]] = field(default_factory=list)
    notices: list[tuple[tuple[str, ...], Watch, ProgressView]] = field(default_factory=list)
    silences: list[tuple[Watch, datetime]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, actor: Actor, reply: Reply) -> None:
        with self.lock:
            self.replies.append((actor.id, reply))

    def progress(self, watch: Watch, view: ProgressView) -> None:
        with self.lock:
            self.views.append((watch, view))

    def notify(self, people: tuple[str, ...], watch: Watch, view: ProgressView) -> None:
        with self.lock:
            self.notices.append((people, watch, view))

    def unreachable(self, watch: Watch, since: datetime) -> None:
        with self.lock:
            self.silences.append((watch, since))


def migrated_store(root: Path) -> Store:
    """A SQLite store at the newest migration (a copy of one migrated once per process)."""
    return Store(migrated_sqlite(root / "kimi-ops.db"))


def chat_settings(
    hosts: dict[str, str],
    appliers: tuple[str, ...] = ("ana", "ben"),
    second_person: bool = False,
    interval_s: float = 1.0,
) -> ChatSettings:
    """Settings for ``hosts`` (name -> url; the first is the default), all on the test token."""
    return ChatSettings(
        hosts=tuple(
            HostSettings(name, url, TOKEN_ENV, default=index == 0)
            for index, (name, url) in enumerate(hosts.items())
        ),
        policy=PolicySettings(appliers=frozenset(appliers), require_second_person=second_person),
        update_interval_s=interval_s,
    )


@contextmanager
def running_core(
    settings: ChatSettings, store: Store, front: RecordingFrontEnd, **kwargs: object
) -> Iterator[ChatCore]:
    environ = {TOKEN_ENV: TOKEN}
    transports: Mapping[str, httpx.BaseTransport] | None = kwargs.pop("transports", None)  # type: ignore[assignment]
    core = build_core(
        settings,
        StoreAudit(store, revisions_source(settings, environ, transports)),
        front,
        environ=environ,
        poll_wait_s=5.0,
        retry_s=0.2,
        transports=transports,
        **kwargs,  # type: ignore[arg-type]
    )
    try:
        yield core
    finally:
        core.close()


def propose_and_apply(
    core: ChatCore, resize: str, proposer: Actor, applier: Actor
) -> OperationReply:
    """``resize`` as ``proposer``, then ``apply`` of that proposal as ``applier``; the started
    operation's reply (the proposal must fit)."""
    proposal = core.handle(resize, proposer)
    assert isinstance(proposal, ProposalReply), proposal
    assert proposal.plan.fits, proposal.plan.reason
    started = core.handle(f"apply {proposal.id}", applier)
    assert isinstance(started, OperationReply), started
    return started


class ShiftedClock:
    """The real clock, with wall time moved forward by what the test adds (for expiry)."""

    def __init__(self) -> None:
        self.shift = timedelta()

    def now(self) -> datetime:
        return datetime.now(UTC) + self.shift

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
