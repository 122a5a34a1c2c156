"""The real host as a ``HostProbe``: psutil for RAM and processes, cgroup v2, NVML for GPUs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bot.agent.host import _memory, _process_table
from bot.agent.host._tree_cache import TreeMembers
from bot.agent.host.nvml import NvmlLibrary, NvmlUnavailable, PynvmlLibrary
from bot.agent.host.probe import GpuFacts, GpuInfo, GpuProcess, ProcessInfo, RamFacts
from bot.clock import Clock, SystemClock

__all__ = ["SystemProbe"]


class SystemProbe:
    """The real host: psutil for RAM and processes, cgroup v2 files, NVML for GPUs.

    NVML is initialised once, on the first ``gpus()`` call. Paths are injectable for tests.
    The members of the server's process tree are scanned at most once per
    :data:`~bot.agent.host._tree_cache.TREE_TTL_S` of ``clock`` (their RSS is read every call).
    """

    def __init__(
        self,
        nvml: NvmlLibrary | None = None,
        proc_self_cgroup: Path = Path("/proc/self/cgroup"),
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        clock: Clock | None = None,
    ) -> None:
        self._nvml: NvmlLibrary = nvml if nvml is not None else PynvmlLibrary()
        self._proc_self_cgroup = proc_self_cgroup
        self._cgroup_root = cgroup_root
        self._nvml_state: str | None = None  # None: not tried; "": ready; else the reason
        self._trees = TreeMembers(
            _process_table.process_tree_pids, (clock or SystemClock()).monotonic
        )

    def ram(self) -> RamFacts:
        total, available = _memory.ram_totals()
        limit, used = _memory.cgroup_memory(self._proc_self_cgroup, self._cgroup_root)
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
        info = _process_table.process_info(pid)
        if info is None:
            return "?"  # NVML can list a pid from another PID namespace, or one just gone
        name, cmdline = info
        return cmdline[0] if cmdline and cmdline[0].startswith("sglang::") else name

    def process_tree_rss(self, pid: int) -> int:
        return _process_table.members_rss(self._trees.members(pid))

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        return [
            ProcessInfo(pid, title, tuple(cmdline))
            for pid, title, cmdline in _process_table.stray_processes(exclude_pids)
        ]
