"""Host facts the agent plans and waits on (RAM, the cgroup limit, GPUs, server processes): the
``HostProbe`` seam and the values it returns.

Two probes implement it: ``SystemProbe`` (``bot.agent.host.system``) reads the real host (psutil,
cgroup v2, NVML); ``SimProbe`` (``bot.agent.host.sim``) reads the simulator's host so a laptop
plans against the simulated 449 GB, 8-GPU machine. The composition root
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
]


@dataclass(frozen=True)
class RamFacts:
    """Host RAM in bytes; the cgroup fields are None when no memory limit applies."""

    total_bytes: int
    available_bytes: int
    cgroup_limit_bytes: int | None = None
    cgroup_used_bytes: int | None = None


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

    def ram(self) -> RamFacts:
        """Host RAM and the cgroup limit (raises RamProbeError if unreadable)."""
        ...

    def gpus(self) -> GpuFacts:
        """GPU memory and compute processes (raises GpuProbeError on an NVML failure)."""
        ...

    def process_tree_rss(self, pid: int) -> int:
        """Bytes held by ``pid`` and all its descendants; 0 if it is gone."""
        ...

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        """Alive ``sglang::scheduler*`` / ``sglang::detokenizer`` processes outside the
        trees of ``exclude_pids`` (the running server)."""
        ...
