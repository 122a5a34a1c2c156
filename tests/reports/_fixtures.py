"""Shared parts of the reports' tests: constructed sample series, a settable clock, a recording
poster, and the agent status JSON the agent's ``GET /v1/status`` documents."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.chat.replies import Reply
from bot.store import CapacitySample

T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
GB = 10**9


class SetClock:
    """Wall time the test sets; ``sleep`` moves it on."""

    def __init__(self, start: datetime = T0) -> None:
        self.current = start

    def now(self) -> datetime:
        return self.current

    def monotonic(self) -> float:
        return self.current.timestamp()

    def sleep(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


@dataclass
class RecordingPoster:
    """Keeps what the scheduler posts, by channel; ``posted`` is set at each post."""

    posts: list[tuple[str, Reply]] = field(default_factory=list)
    posted: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, channel: str, reply: Reply) -> None:
        with self.lock:
            self.posts.append((channel, reply))
        self.posted.set()


def series(
    host: str,
    end: datetime,
    count: int,
    *,
    usage: float | None,
    queued: int | None,
    available_gb: float = 237.9,
    total_gb: float = 449.0,
    every_min: int = 5,
) -> list[CapacitySample]:
    """``count`` samples every ``every_min`` minutes up to ``end``, all with the same figures."""
    return [
        CapacitySample(
            host=host,
            at=end - timedelta(minutes=every_min * (count - 1 - i)),
            ram_total_bytes=round(total_gb * GB),
            ram_available_bytes=round(available_gb * GB),
            token_usage=usage,
            queued_requests=queued,
            running_requests=None if usage is None else 50,
        )
        for i in range(count)
    ]


def status_json(host: str = "kimi-01", **changes: Any) -> dict[str, Any]:
    """An agent's ``GET /v1/status`` body, as the agent's API documents it (the field notes'
    host: 449 GB RAM, TP 8, ratio 2)."""
    body: dict[str, Any] = {
        "host": {"name": host, "backend": "process", "probe": "sim"},
        "server": {"state": "running", "health_code": 200, "version": "0.5.9", "pid": 4242,
                   "uptime_s": 812.4},
        "config": {"enable_hierarchical_cache": True, "hicache_ratio": 2.0, "hicache_size": None,
                   "effective": "ratio 2 x device pool"},
        "capacity": {"device_tokens": 159274, "kv_bytes_per_token": 70247.4,
                     "host_tokens_per_rank": 318549, "host_gb_per_rank": 22.39, "ranks": 8},
        "ram": {"total_gb": 449.0, "available_gb": 237.9, "server_held_gb": 207.1},
        "gpus": {"available": True, "reason": None, "devices": [
            {"index": 0, "memory_total_gb": 103.08, "memory_used_gb": 94.51},
            {"index": 1, "memory_total_gb": 103.08, "memory_used_gb": 94.49},
        ]},
        "operation": None, "fingerprint": "3f1c0a9e5d7b2c41", "problems": [],
    }  # fmt: skip
    body.update(changes)
    return body
