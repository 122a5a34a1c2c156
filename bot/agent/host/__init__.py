"""Host facts: the ``HostProbe`` seam, the real host and the simulator's.

- :mod:`bot.agent.host.probe`: the seam and its values (RAM, GPUs, processes);
- :mod:`bot.agent.host.system`: the real host (``SystemProbe``: psutil, cgroup v1/v2, NVML through
  :mod:`bot.agent.host.nvml`);
- :mod:`bot.agent.host.sim`: the simulated host of ``bot.sim`` (``SimProbe``).
"""

from __future__ import annotations

from bot.agent.host.nvml import NvmlLibrary, NvmlUnavailable, PynvmlLibrary
from bot.agent.host.probe import (
    GpuFacts,
    GpuInfo,
    GpuProcess,
    HostProbe,
    ProcessInfo,
    RamFacts,
    ServerCgroup,
)
from bot.agent.host.system import SystemProbe

__all__ = [
    "GpuFacts",
    "GpuInfo",
    "GpuProcess",
    "HostProbe",
    "NvmlLibrary",
    "NvmlUnavailable",
    "ProcessInfo",
    "PynvmlLibrary",
    "RamFacts",
    "ServerCgroup",
    "SystemProbe",
]
