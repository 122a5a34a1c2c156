"""The real host as a ``HostProbe``: psutil for RAM and processes, the server's memory cgroup
(v1 or v2, ``bot.agent.host._cgroup``), NVML for GPUs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from bot.agent.host import _memory, _process_table
from bot.agent.host._cgroup import (
    CgroupVersion,
    MemoryDomain,
    PlannedLimits,
    parse_membership,
    read_cgroup_domain,
)
from bot.agent.host._tree_cache import TreeMembers
from bot.agent.host.nvml import NvmlLibrary, NvmlUnavailable, PynvmlLibrary
from bot.agent.host.probe import (
    GpuFacts,
    GpuInfo,
    GpuProcess,
    ProcessInfo,
    RamFacts,
    ServerCgroup,
    released_within,
)
from bot.clock import Clock, SystemClock
from bot.errors import RamProbeError

__all__ = ["SystemProbe"]


class SystemProbe:
    """The real host: psutil for RAM and processes, cgroup files, NVML for GPUs.

    NVML is initialised once, on the first ``gpus()`` call. ``proc_root`` (``/proc``), ``root``
    (prefixed to the cgroup mount points of ``/proc/self/mountinfo``) and ``meminfo`` (host
    (total, available) bytes) are injectable for tests. The members of the server's process
    tree are scanned at most once per :data:`~bot.agent.host._tree_cache.TREE_TTL_S` of
    ``clock`` (their memory is read every call).
    """

    def __init__(
        self,
        nvml: NvmlLibrary | None = None,
        proc_root: Path = Path("/proc"),
        root: Path = Path("/"),
        clock: Clock | None = None,
        meminfo: Callable[[], tuple[int, int]] = _memory.ram_totals,
    ) -> None:
        self._nvml: NvmlLibrary = nvml if nvml is not None else PynvmlLibrary()
        self._proc = proc_root
        self._root = root
        self._meminfo = meminfo
        self._nvml_state: str | None = None  # None: not tried; "": ready; else the reason
        self._trees = TreeMembers(
            _process_table.process_tree_pids, (clock or SystemClock()).monotonic
        )

    def ram(self, server: ServerCgroup | None = None) -> RamFacts:
        total, available = self._meminfo()
        domain, own = self._domain(server or ServerCgroup())
        if domain is None:
            return RamFacts(total, available)
        binding = domain.binding if domain.limited else None
        return RamFacts(
            total,
            available,
            cgroup_limit_bytes=None if binding is None else binding.limit_bytes,
            cgroup_used_bytes=None if binding is None else binding.usage_bytes,
            cgroup_path=None if binding is None else binding.path,
            cgroup_limit_file=None if binding is None else binding.limit_file,
            cgroup=domain.cgroup,
            server_cgroup_used_bytes=own,
        )

    def _read_proc(self, relative: str) -> str | None:
        try:
            return (self._proc / relative).read_text()
        except (FileNotFoundError, ProcessLookupError):
            return None
        except OSError as exc:
            raise RamProbeError(f"cannot read {self._proc / relative}: {exc}") from exc

    def _domain(self, server: ServerCgroup) -> tuple[MemoryDomain | None, int | None]:
        """The server's domain, and its cgroup's own usage when that cgroup is the server's
        alone."""
        mountinfo = self._read_proc("self/mountinfo")
        if mountinfo is None:
            return None, None  # no procfs: no cgroup to honour
        if server.pid is not None:
            text = self._read_proc(f"{server.pid}/cgroup")
            if text is not None:
                domain = read_cgroup_domain(parse_membership(text), mountinfo, self._root)
                if domain is None or domain.own_usage_bytes is None:
                    return domain, None
                alone = self._holds_only_tree_of(domain, server.pid, mountinfo)
                return domain, domain.own_usage_bytes if alone else None
            # The server exited since its state was read: it would start again where planned.
        if server.planned_path is not None:
            path = PurePosixPath(server.planned_path)
            planned = PlannedLimits(
                server.planned_path, server.planned_max_bytes, server.planned_high_bytes
            )
            memberships = {CgroupVersion.V1: path, CgroupVersion.V2: path}
            return read_cgroup_domain(memberships, mountinfo, self._root, planned), None
        own = self._read_proc("self/cgroup")
        if own is None:
            return None, None
        return read_cgroup_domain(parse_membership(own), mountinfo, self._root), None

    def _holds_only_tree_of(self, domain: MemoryDomain, pid: int, mountinfo: str) -> bool:
        """Whether ``domain``'s cgroup is the server's own: not the agent's, and every process
        in it or below it is of the server's tree (a unit's cgroup, a container's)."""
        if domain.directory is None:
            return False
        mine = self._read_proc("self/cgroup")
        if mine is not None:
            agent = read_cgroup_domain(parse_membership(mine), mountinfo, self._root)
            if agent is not None and agent.directory == domain.directory:
                return False
        tree = self._trees.members(pid)
        members: set[int] = set()
        try:
            for procs in [domain.directory / "cgroup.procs",
                          *domain.directory.rglob("*/cgroup.procs")]:  # fmt: skip
                members |= {int(word) for word in procs.read_text().split()}
        except (OSError, ValueError):
            return False
        return bool(members) and members <= tree

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

    def released_by_stop(self, pid: int, ram: RamFacts) -> int:
        tree = self._trees.members(pid)
        if not tree:
            return 0
        if ram.server_cgroup_used_bytes is not None:
            return released_within(ram.server_cgroup_used_bytes, ram)
        return released_within(_process_table.members_pss(tree), ram)

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        return [
            ProcessInfo(pid, title, tuple(cmdline))
            for pid, title, cmdline in _process_table.stray_processes(exclude_pids)
        ]
