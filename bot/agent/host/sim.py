"""Host facts from the simulator (``bot.sim``): its host profile and shared state.

On a laptop or in CI the agent plans against the simulated host (for ``kimi-k25-8gpu``: 449 GB
RAM, 8 GPUs) instead of the machine it runs on: RAM available is the profile's figure less what
live simulated servers hold, the GPUs are the profile's with the simulators as their compute
processes, and the RAM a restart releases is the host pool the simulator recorded for that pid.
Stray ``sglang::*`` processes are those the simulated host records (``python -m bot.sim.stray``
registers itself there), not whatever else runs on this machine: tests and demos sharing a machine
each see only their own simulated host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from bot.agent.host import _process_table
from bot.agent.host._tree_cache import TreeMembers
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
from bot.sim import HostProfile, HostSnapshot, load_profile, read_host_state, state_dir_for

if TYPE_CHECKING:
    from bot.agent.config import AgentSettings

__all__ = ["SIM_CGROUP", "SimProbe"]

#: The memory cgroup a simulated server with a limit runs in (a name only: nothing is created).
SIM_CGROUP = "/kimi-sim.slice/sglang.service"


class SimProbe:
    """``HostProbe`` over the simulator's host ``profile`` and its state directory; a server's
    tree members are scanned at most once per ``TREE_TTL_S`` of ``clock``, as
    :class:`~bot.agent.host.system.SystemProbe` does."""

    def __init__(
        self,
        profile: HostProfile,
        state_dir: Path,
        now: Callable[[], float] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.profile = profile
        self.state_dir = state_dir
        self._now = now
        self._trees = TreeMembers(
            _process_table.process_tree_pids, (clock or SystemClock()).monotonic
        )

    @classmethod
    def from_settings(cls, settings: AgentSettings, clock: Clock | None = None) -> SimProbe:
        """The profile of ``[agent] sim_profile``; the state dir of ``sim_state_dir``, else the
        one the simulator itself derives from the server's environment."""
        profile = load_profile(settings.sim_profile)
        environ = dict(settings.env)
        if settings.sim_state_dir is not None:
            environ["KIMI_SIM_STATE_DIR"] = str(settings.sim_state_dir)
        return cls(profile, state_dir_for(profile, environ), clock=clock)

    def _snapshot(self) -> HostSnapshot:
        return read_host_state(
            self.profile, self.state_dir, None if self._now is None else self._now()
        )

    def ram(self, server: ServerCgroup | None = None) -> RamFacts:
        """The simulated host's RAM; with a profile's ``cgroup_limit_gb``, the memory cgroup the
        simulated server runs in alone (``SIM_CGROUP``): its usage is what the live simulated
        servers hold, as the simulator sizes its pools against it."""
        snapshot = self._snapshot()
        limit = self.profile.cgroup_limit_bytes
        if limit is None:
            return RamFacts(snapshot.ram_total_bytes, snapshot.ram_available_bytes)
        used = sum(s.host_bytes for s in snapshot.servers)
        return RamFacts(
            snapshot.ram_total_bytes,
            snapshot.ram_available_bytes,
            cgroup_limit_bytes=limit,
            cgroup_used_bytes=used,
            cgroup_path=SIM_CGROUP,
            cgroup_limit_file="memory.max",
            cgroup=SIM_CGROUP,
            server_cgroup_used_bytes=used,
        )

    def gpus(self) -> GpuFacts:
        snapshot = self._snapshot()
        return GpuFacts(
            available=True,
            gpus=tuple(
                GpuInfo(
                    gpu.index,
                    gpu.name,
                    gpu.memory_total_bytes,
                    gpu.memory_used_bytes,
                    tuple(GpuProcess(p.pid, p.name, p.used_bytes) for p in gpu.processes),
                )
                for gpu in snapshot.gpus
            ),
        )

    def released_by_stop(self, pid: int, ram: RamFacts) -> int:
        """Host bytes the simulator records for ``pid`` or any of its descendants (a launcher
        may sit between the agent and the simulator), within what ``ram`` has in use; 0 when
        none is a live simulated server."""
        tree = self._trees.members(pid) or {pid}
        held = sum(s.host_bytes for s in self._snapshot().servers if s.pid in tree)
        return released_within(held, ram)

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        """The simulated host's ``sglang::*`` GPU holders outside the trees of
        ``exclude_pids``."""
        excluded: set[int] = set()
        for pid in exclude_pids:
            excluded |= _process_table.process_tree_pids(pid) or {pid}
        strays: dict[int, ProcessInfo] = {}
        for gpu in self._snapshot().gpus:
            for process in gpu.processes:
                if process.name.startswith("sglang::") and process.pid not in excluded:
                    strays.setdefault(
                        process.pid, ProcessInfo(process.pid, process.name, (process.name,))
                    )
        return list(strays.values())
