"""The post-ready memory watch: a thread that samples the server's headroom while it serves.

Every ``interval_s`` of the clock, while the server runs, answers ``/health`` 200 and no
operation is unfinished (a start is the startup guard's to watch), the watch reads the probe,
turns the reading into a headroom (:func:`~bot.agent.engine.memory_watch.headroom_of`) and
hands it to :class:`~bot.agent.engine.memory_watch.HeadroomCrossings`. A crossing becomes a
:class:`MemoryNotice`, numbered and kept in ``memory_notices.json`` in the state directory (the
last :data:`KEPT_NOTICES`), which ``/v1/status`` lists for the bot to post and report. The
watch only reads: it never restarts or stops the server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bot.agent.control._atomic_file import read_json, write_json
from bot.agent.control.protocol import ServerControl
from bot.agent.engine.context import SGLangLike
from bot.agent.engine.memory_watch import (
    REARM_MARGIN_BYTES,
    HeadroomCrossings,
    HeadroomSample,
    MemoryCrossing,
    crossing_sentence,
    headroom_of,
)
from bot.agent.host.probe import HostProbe
from bot.clock import Clock
from bot.errors import BackendError, ProbeError
from bot.planner import GB

__all__ = [
    "DEFAULT_INTERVAL_S",
    "KEPT_NOTICES",
    "NOTICES_FILE",
    "MemoryNotice",
    "MemoryNoticeLog",
    "PostReadyWatch",
]

log = logging.getLogger(__name__)

#: How often the watch samples a serving server: the OOM killer needs minutes of growth.
DEFAULT_INTERVAL_S = 5.0
NOTICES_FILE = "memory_notices.json"
KEPT_NOTICES = 50


@dataclass(frozen=True)
class MemoryNotice:
    """One crossing as the agent reports it: ``seq`` counts 1, 2, 3 ... over the agent's
    life (the bot posts those above the last it posted); figures in GB (1e9)."""

    seq: int
    at: str
    server_pid: int | None
    where: str
    headroom_gb: float
    available_gb: float
    cgroup_limit_gb: float | None
    floor_gb: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> MemoryNotice:
        limit = raw.get("cgroup_limit_gb")
        pid = raw.get("server_pid")
        return cls(
            seq=int(raw["seq"]),
            at=str(raw["at"]),
            server_pid=None if pid is None else int(pid),
            where=str(raw["where"]),
            headroom_gb=float(raw["headroom_gb"]),
            available_gb=float(raw["available_gb"]),
            cgroup_limit_gb=None if limit is None else float(limit),
            floor_gb=float(raw["floor_gb"]),
            message=str(raw["message"]),
        )

    @classmethod
    def of(cls, seq: int, crossing: MemoryCrossing, server_pid: int | None) -> MemoryNotice:
        sample = crossing.sample
        limit = sample.cgroup_limit_bytes
        return cls(
            seq=seq,
            at=sample.at,
            server_pid=server_pid,
            where=sample.where,
            headroom_gb=round(sample.headroom_bytes / GB, 2),
            available_gb=round(sample.available_bytes / GB, 2),
            cgroup_limit_gb=None if limit is None else round(limit / GB, 2),
            floor_gb=round(crossing.floor_bytes / GB, 2),
            message=crossing_sentence(crossing),
        )


class MemoryNoticeLog:
    """The notices kept in ``path`` (a JSON list, replaced atomically), oldest first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._notices = self._load()

    def _load(self) -> list[MemoryNotice]:
        try:
            raw = read_json(self.path)
            return [MemoryNotice.from_dict(item) for item in raw or []]
        except (BackendError, KeyError, TypeError, ValueError) as exc:
            # A damaged record must not keep the agent from serving: start a new one.
            log.warning("memory notices in %s unreadable (%s); starting afresh", self.path, exc)
            return []

    def add(self, crossing: MemoryCrossing, server_pid: int | None) -> MemoryNotice:
        with self._lock:
            seq = self._notices[-1].seq + 1 if self._notices else 1
            notice = MemoryNotice.of(seq, crossing, server_pid)
            self._notices = [*self._notices, notice][-KEPT_NOTICES:]
            try:
                write_json(self.path, [n.to_dict() for n in self._notices])
            except BackendError as exc:  # still listed from memory
                log.warning("could not keep memory notice %s: %s", seq, exc)
            return notice

    def recent(self, limit: int = 10) -> list[MemoryNotice]:
        with self._lock:
            return self._notices[-limit:]


class PostReadyWatch:
    """Samples while the server serves (see the module docstring); ``tick`` is one turn, which
    tests call with a fake clock; ``start`` runs turns every ``interval_s`` in a thread."""

    def __init__(
        self,
        probe: HostProbe,
        control: ServerControl,
        sglang: SGLangLike,
        operation_running: Callable[[], bool],
        clock: Clock,
        notices: MemoryNoticeLog,
        floor_bytes: float,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        margin_bytes: float = REARM_MARGIN_BYTES,
    ) -> None:
        self.probe = probe
        self.control = control
        self.sglang = sglang
        self.operation_running = operation_running
        self.clock = clock
        self.notices = notices
        self.interval_s = interval_s
        self.crossings = HeadroomCrossings(floor_bytes, margin_bytes)
        self.last_sample: HeadroomSample | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def floor_bytes(self) -> float:
        return self.crossings.floor_bytes

    def tick(self) -> MemoryNotice | None:
        """One sample if the server serves and no operation runs; the notice it raised."""
        if self.operation_running():
            return None
        status = self.control.status()
        if not status.running or self.sglang.health() != 200:
            return None
        try:
            reading = self.probe.ram(self.control.cgroup())  # the server's own domain
        except ProbeError as exc:  # a probe hiccup: try again next turn
            log.warning("the post-ready watch could not read host RAM: %s", exc)
            return None
        at = self.clock.now().isoformat(timespec="milliseconds")
        sample = HeadroomSample(**{**asdict(headroom_of(reading)), "at": at})
        self.last_sample = sample
        crossing = self.crossings.observe(sample)
        if crossing is None:
            return None
        notice = self.notices.add(crossing, status.main_pid)
        log.warning("memory notice %s: %s", notice.seq, notice.message)
        return notice

    def status(self) -> dict[str, Any]:
        """What ``/v1/status`` shows of the watch: the floor, whether the headroom is under it
        now, the last sample and the recent notices."""
        last = self.last_sample
        return {
            "floor_gb": round(self.floor_bytes / GB, 2),
            "rearm_margin_gb": round(self.crossings.margin_bytes / GB, 2),
            "interval_s": self.interval_s,
            "below_floor": self.crossings.below,
            "last_headroom_gb": None if last is None else round(last.headroom_bytes / GB, 2),
            "last_sampled_at": None if last is None else last.at,
            "notices": [n.to_dict() for n in self.notices.recent()],
        }

    def problem(self) -> str | None:
        """The sentence ``status`` lists among its problems while the headroom is under the
        floor (the latest notice's), else None."""
        recent = self.notices.recent(1)
        if not self.crossings.below or not recent:
            return None
        return f"{recent[0].message} (since {recent[0].at})"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # the watch must never take the agent down
                log.exception("the post-ready watch failed a turn")
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="kimi-post-ready-watch", daemon=True
            )
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
