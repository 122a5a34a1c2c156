"""After ready: the server's memory headroom against the guard's floor, one notice per crossing.

The startup guard (:mod:`bot.agent.engine.guard`) watches RAM only while a start runs. Once the
server serves, its memory still grows beside the pinned host pool (requests, the tokenizer,
another process on the host), and the kernel's OOM killer ends it without a word. The post-ready
watch samples the headroom while the server serves and no operation runs, and says so when it
falls under ``[agent] guard_floor_gb``, with the figures. It never restarts or stops anything.

The decision is pure: samples in, crossings out, with hysteresis so a headroom that hovers at
the floor raises one notice, not one per sample::

    crossings = HeadroomCrossings(floor_bytes=10.74e9, margin_bytes=1e9)
    crossings.observe(sample(12e9))   -> None        (above the floor: armed)
    crossings.observe(sample(8e9))    -> MemoryCrossing(headroom 8.0 GB < floor 10.7 GB)
    crossings.observe(sample(7e9))    -> None        (still under: said once)
    crossings.observe(sample(11e9))   -> None        (above the floor, not by the margin)
    crossings.observe(sample(11.8e9)) -> None        (floor + margin reached: re-armed)
    crossings.observe(sample(9e9))    -> MemoryCrossing(...)   (the second crossing)
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent.host.probe import RamFacts
from bot.planner import GB

__all__ = [
    "REARM_MARGIN_BYTES",
    "HeadroomCrossings",
    "HeadroomSample",
    "MemoryCrossing",
    "crossing_sentence",
    "headroom_of",
]

#: The headroom must climb this far above the floor before a new fall under it is news again.
REARM_MARGIN_BYTES = 1e9


@dataclass(frozen=True)
class HeadroomSample:
    """One reading of the server's memory domain: its headroom, the host's available RAM and
    the cgroup's limit and usage when one applies (bytes), at ``at`` (ISO wall time)."""

    at: str
    headroom_bytes: int
    available_bytes: int
    cgroup_limit_bytes: int | None = None
    cgroup_used_bytes: int | None = None

    @property
    def where(self) -> str:
        """What bounds the headroom: the cgroup's room under its limit, or the host's RAM."""
        return "cgroup" if self.headroom_bytes < self.available_bytes else "host"


@dataclass(frozen=True)
class MemoryCrossing:
    """The headroom fell under the floor: the sample that crossed it and the floor."""

    sample: HeadroomSample
    floor_bytes: float

    @property
    def shortfall_bytes(self) -> float:
        return self.floor_bytes - self.sample.headroom_bytes


def headroom_of(ram: RamFacts) -> HeadroomSample:
    """The headroom of one probe reading without its time: the least of the host's available
    RAM and the cgroup's room under its limit (SGLang's rule: docs/sglang.md, After ready).

    Returned as a sample stamped ``at=""``; the watch stamps it. The headroom is the probe's
    own (:attr:`RamFacts.headroom_bytes`): the guard and the planner read the same figure."""
    return HeadroomSample(
        at="",
        headroom_bytes=ram.headroom_bytes,
        available_bytes=ram.available_bytes,
        cgroup_limit_bytes=ram.cgroup_limit_bytes,
        cgroup_used_bytes=ram.cgroup_used_bytes,
    )


class HeadroomCrossings:
    """Crossings of ``floor_bytes`` by a stream of samples, at most one per fall: after a
    crossing it re-arms only once a sample is at least ``margin_bytes`` above the floor."""

    def __init__(self, floor_bytes: float, margin_bytes: float = REARM_MARGIN_BYTES) -> None:
        if floor_bytes < 0 or margin_bytes < 0:
            raise ValueError(
                f"floor {floor_bytes!r} and margin {margin_bytes!r} must be >= 0 bytes"
            )
        self.floor_bytes = floor_bytes
        self.margin_bytes = margin_bytes
        self._armed = True

    @property
    def below(self) -> bool:
        """True from a crossing until the headroom is back above floor + margin."""
        return not self._armed

    def observe(self, sample: HeadroomSample) -> MemoryCrossing | None:
        """The crossing ``sample`` makes, or None (above the floor, or already said)."""
        if self._armed:
            if sample.headroom_bytes < self.floor_bytes:
                self._armed = False
                return MemoryCrossing(sample, self.floor_bytes)
            return None
        if sample.headroom_bytes >= self.floor_bytes + self.margin_bytes:
            self._armed = True
        return None


def crossing_sentence(crossing: MemoryCrossing) -> str:
    """The notice in one sentence, with the figures (GB of 1e9)."""
    sample = crossing.sample
    if sample.where == "cgroup" and sample.cgroup_limit_bytes is not None:
        where = (
            f"the server's cgroup has {sample.headroom_bytes / GB:.1f} GB left under its "
            f"{sample.cgroup_limit_bytes / GB:.1f} GB limit"
        )
    else:
        where = f"host RAM available fell to {sample.headroom_bytes / GB:.1f} GB"
    return (
        f"after ready: {where}, below the guard's floor of {crossing.floor_bytes / GB:.1f} GB "
        f"({crossing.shortfall_bytes / GB:.1f} GB short); the server keeps running, nothing was "
        "restarted, and the OOM killer may end it if memory keeps growing"
    )
