"""Host facts the agent plans and waits on (RAM, the server's memory cgroup, GPUs, server
processes): the ``HostProbe`` seam and the values it returns.

Two probes implement it: ``SystemProbe`` (``bot.agent.host.system``) reads the real host
(psutil, cgroup v1 and v2, NVML); ``SimProbe`` (``bot.agent.host.sim``) reads the simulator's
host so a laptop plans against the simulated 449 GB, 8-GPU machine. The composition root
(``bot.agent.service.make_probe``) picks one from ``[agent] probe``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "GpuFacts",
    "GpuInfo",
    "GpuProcess",
    "HostProbe",
    "ProcessInfo",
    "RamFacts",
    "ServerCgroup",
    "released_within",
]


@dataclass(frozen=True)
class ServerCgroup:
    """Where the server's memory is charged, as its backend knows it.

    ``pid``: a running server, whose ``/proc/<pid>/cgroup`` says. Else ``planned``: the cgroup
    a stopped systemd unit will start in (``/system.slice/sglang.service``) with the unit's
    ``MemoryMax=``/``MemoryHigh=``. Neither: the agent's own cgroup, where a process-backend
    server it spawns will run.
    """

    pid: int | None = None
    planned_path: str | None = None
    planned_max_bytes: int | None = None
    planned_high_bytes: int | None = None


@dataclass(frozen=True)
class RamFacts:
    """Host RAM and the server's memory domain, in bytes.

    ``cgroup`` is the server's memory cgroup (None: none is known, as on the simulated host).
    The ``cgroup_limit_*`` fields describe the level whose limit leaves the least
    (``cgroup_path``, e.g. ``/system.slice``, and ``cgroup_limit_file``, ``memory.max``), with
    ``cgroup_used_bytes`` its usage less reclaimable file pages; all None when no level sets a
    limit. ``server_cgroup_used_bytes`` is the usage (less file pages) of a cgroup that holds
    the server's processes and nothing else (a unit's, a container's): what a stop frees.
    """

    total_bytes: int
    available_bytes: int
    cgroup_limit_bytes: int | None = None
    cgroup_used_bytes: int | None = None
    cgroup_path: str | None = None
    cgroup_limit_file: str | None = None
    cgroup: str | None = None
    server_cgroup_used_bytes: int | None = None

    @property
    def cgroup_headroom_bytes(self) -> int | None:
        """What the binding level leaves: limit less usage less file pages (SGLang's rule)."""
        if self.cgroup_limit_bytes is None or self.cgroup_used_bytes is None:
            return None
        return max(0, self.cgroup_limit_bytes - self.cgroup_used_bytes)

    @property
    def headroom_bytes(self) -> int:
        """What the server's domain can give: the smaller of host MemAvailable and the cgroup's
        headroom, as SGLang's ``available_host_memory_bytes``."""
        cgroup = self.cgroup_headroom_bytes
        return self.available_bytes if cgroup is None else min(self.available_bytes, cgroup)

    @property
    def host_used_bytes(self) -> int:
        return max(0, self.total_bytes - self.available_bytes)


def released_within(counted: int, ram: RamFacts) -> int:
    """``counted`` bytes a stop frees, never more than the host has in use (MemTotal less
    MemAvailable) nor more than the binding cgroup level holds: the server is inside both."""
    released = min(max(0, counted), ram.host_used_bytes)
    if ram.cgroup_used_bytes is not None:
        released = min(released, ram.cgroup_used_bytes)
    return released


@dataclass(frozen=True)
class GpuProcess:
    """A compute process holding GPU memory (name from psutil; "?" if it is not visible)."""

    pid: int
    name: str
    used_bytes: int


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: its memory and the compute processes on it."""

    index: int
    name: str
    memory_total_bytes: int
    memory_used_bytes: int
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuFacts:
    """The host's GPUs, or ``available=False`` with the reason (no NVML library, no driver)."""

    available: bool
    reason: str | None = None
    gpus: tuple[GpuInfo, ...] = ()


@dataclass(frozen=True)
class ProcessInfo:
    """An alive process: pid, name (its title for SGLang children) and command line."""

    pid: int
    name: str
    cmdline: tuple[str, ...] = ()


class HostProbe(Protocol):
    """What the agent asks the host. Every method reads fresh facts."""

    def ram(self, server: ServerCgroup | None = None) -> RamFacts:
        """Host RAM and the memory domain of ``server`` (the agent's own cgroup when None);
        raises RamProbeError if unreadable."""
        ...

    def gpus(self) -> GpuFacts:
        """GPU memory and compute processes (raises GpuProbeError on an NVML failure)."""
        ...

    def released_by_stop(self, pid: int, ram: RamFacts) -> int:
        """Bytes a stop of the server ``pid`` frees, each page counted once: the usage of a
        cgroup of its own (``ram.server_cgroup_used_bytes``), else the proportional set size
        of ``pid`` and its descendants; within what the host and the cgroup of ``ram`` hold
        (:func:`released_within`). 0 if it is gone."""
        ...

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        """Alive ``sglang::scheduler*`` / ``sglang::detokenizer`` processes outside the
        trees of ``exclude_pids`` (the running server)."""
        ...
