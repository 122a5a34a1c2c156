"""Host facts the agent plans and waits on: RAM, the cgroup limit, GPUs, server processes.

``HostProbe`` is the seam: ``SystemProbe`` reads the real host (psutil, cgroup v2, NVML);
``SimProbe`` (``bot.agent._sim_probe``) reads the simulator's host so a laptop plans against the
simulated 449 GB, 8-GPU machine. ``make_probe(settings)`` picks one from ``[agent] probe``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bot.agent import _ram
from bot.agent._gpu import NvmlLibrary, NvmlUnavailable, PynvmlLibrary
from bot.errors import ConfigError

if TYPE_CHECKING:
    from bot.agent.config import AgentSettings

__all__ = [
    "GpuFacts",
    "GpuInfo",
    "GpuProcess",
    "HostProbe",
    "NvmlLibrary",
    "NvmlUnavailable",
    "ProcessInfo",
    "RamFacts",
    "SystemProbe",
    "make_probe",
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


class SystemProbe:
    """The real host: psutil for RAM and processes, cgroup v2 files, NVML for GPUs.

    NVML is initialised once, on the first ``gpus()`` call. Paths are injectable for tests.
    """

    def __init__(
        self,
        nvml: NvmlLibrary | None = None,
        proc_self_cgroup: Path = Path("/proc/self/cgroup"),
        cgroup_root: Path = Path("/sys/fs/cgroup"),
    ) -> None:
        self._nvml: NvmlLibrary = nvml if nvml is not None else PynvmlLibrary()
        self._proc_self_cgroup = proc_self_cgroup
        self._cgroup_root = cgroup_root
        self._nvml_state: str | None = None  # None: not tried; "": ready; else the reason

    def ram(self) -> RamFacts:
        total, available = _ram.ram_totals()
        limit, used = _ram.cgroup_memory(self._proc_self_cgroup, self._cgroup_root)
        return RamFacts(total, available, limit, used)

    def gpus(self) -> GpuFacts:
        if self._nvml_state is None:
            try:
                self._nvml.init()
                self._nvml_state = ""
            except NvmlUnavailable as exc:
                self._nvml_state = str(exc) or "NVML is not available"
        if self._nvml_state:
            return GpuFacts(available=False, reason=self._nvml_state)
        gpus = []
        for index in range(self._nvml.device_count()):
            total, used = self._nvml.memory(index)
            processes = tuple(
                GpuProcess(pid, self._name_of(pid), used_bytes)
                for pid, used_bytes in self._nvml.compute_processes(index)
            )
            gpus.append(GpuInfo(index, self._nvml.device_name(index), total, used, processes))
        return GpuFacts(available=True, gpus=tuple(gpus))

    @staticmethod
    def _name_of(pid: int) -> str:
        info = _ram.process_info(pid)
        if info is None:
            return "?"  # NVML can list a pid from another PID namespace, or one just gone
        name, cmdline = info
        return cmdline[0] if cmdline and cmdline[0].startswith("sglang::") else name

    def process_tree_rss(self, pid: int) -> int:
        return _ram.process_tree_rss(pid)

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        return [
            ProcessInfo(pid, title, tuple(cmdline))
            for pid, title, cmdline in _ram.stray_processes(exclude_pids)
        ]


def make_probe(settings: AgentSettings) -> HostProbe:
    """The probe ``[agent] probe`` names: "host" (this machine) or "sim" (the simulator's host)."""
    if settings.probe == "host":
        return SystemProbe()
    if settings.probe == "sim":
        from bot.agent._sim_probe import SimProbe  # the simulator is only needed here

        return SimProbe.from_settings(settings)
    raise ConfigError(f"[agent] probe is {settings.probe!r}; expected one of: host, sim")
