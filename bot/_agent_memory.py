"""A host agent's post-ready memory watch as ``GET /v1/status`` lists it, for
:mod:`bot.agent_json`: whether the server's headroom is under the guard's floor now, and the
recent notices, each numbered so the bot posts each once::

    "memory_watch": {"floor_gb": 10.74, "below_floor": true, ...,
                     "notices": [{"seq": 1, "at": "2026-02-24T11:31:02.114+00:00",
                                  "where": "host", "headroom_gb": 8.2, "available_gb": 8.2,
                                  "cgroup_limit_gb": null, "floor_gb": 10.74,
                                  "message": "after ready: host RAM available fell to ..."}]}
    -> MemoryWatchView(below_floor=True, notices=(AgentMemoryNotice(seq=1, ...),))

An agent older than the watch sends no ``memory_watch``: no notices, not below the floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot._agent_fields import field_of, instant, mapping, number, optional
from bot.errors import AgentError

__all__ = ["AgentMemoryNotice", "MemoryWatchView"]


@dataclass(frozen=True)
class AgentMemoryNotice:
    """One fall of the server's headroom under the floor after ready (figures in GB, 1e9)."""

    seq: int
    at: datetime
    where: str  # "host" or "cgroup": what bounded the headroom
    headroom_gb: float
    available_gb: float | None
    cgroup_limit_gb: float | None
    floor_gb: float
    message: str

    @classmethod
    def from_json(cls, body: object, where: str) -> AgentMemoryNotice:
        notice = mapping(body, where)
        seq = field_of(notice, "seq", int, where)
        headroom = number(notice, "headroom_gb", where)
        floor = number(notice, "floor_gb", where)
        if seq < 1 or headroom is None or floor is None:
            raise AgentError(f"{where} needs a seq >= 1, a headroom_gb and a floor_gb")
        return cls(
            seq=seq,
            at=instant(field_of(notice, "at", str, where), f"{where}'s at"),
            where=field_of(notice, "where", str, where),
            headroom_gb=headroom,
            available_gb=number(notice, "available_gb", where),
            cgroup_limit_gb=number(notice, "cgroup_limit_gb", where),
            floor_gb=floor,
            message=field_of(notice, "message", str, where),
        )


@dataclass(frozen=True)
class MemoryWatchView:
    """The watch's section of the status: under the floor now, and its notices, oldest first."""

    below_floor: bool = False
    notices: tuple[AgentMemoryNotice, ...] = ()

    @classmethod
    def from_json(cls, body: object, where: str) -> MemoryWatchView:
        if body is None:
            return cls()
        watch = mapping(body, where)
        items = optional(watch, "notices", list, where) or []
        notices = tuple(
            AgentMemoryNotice.from_json(item, f"{where}'s notice {i}")
            for i, item in enumerate(items)
        )
        return cls(below_floor=bool(optional(watch, "below_floor", bool, where)), notices=notices)
