"""GPU facts through NVML (``nvidia-ml-py``, imported as ``pynvml``), behind ``NvmlLibrary``.

No library or no driver is a normal state (a laptop, a CI runner): it yields
``GpuFacts(available=False, reason=...)``. Any other NVML failure is a ``GpuProbeError``.
"""

from __future__ import annotations

from typing import Any, Protocol

from bot.errors import GpuProbeError

__all__ = ["NvmlLibrary", "NvmlUnavailable", "PynvmlLibrary"]


class NvmlUnavailable(Exception):
    """NVML cannot run on this host (no library, no driver); ``str()`` says why."""


class NvmlLibrary(Protocol):
    """The few NVML calls the agent makes; tests give a fake (no GPU on a test machine).

    Implementations raise ``NvmlUnavailable`` when there is no NVML at all and ``GpuProbeError``
    for any other failure.
    """

    def init(self) -> None: ...

    def device_count(self) -> int: ...

    def device_name(self, index: int) -> str: ...

    def memory(self, index: int) -> tuple[int, int]:
        """(total, used) bytes of GPU ``index``."""
        ...

    def compute_processes(self, index: int) -> list[tuple[int, int]]:
        """(pid, used bytes) of each compute process on GPU ``index`` (0 if NVML can't tell)."""
        ...


class PynvmlLibrary:
    """The real NVML, through ``pynvml`` from the ``nvidia-ml-py`` distribution."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def init(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as exc:
            raise NvmlUnavailable(f"no NVML library on this host ({exc})") from exc
        except pynvml.NVMLError_DriverNotLoaded as exc:
            raise NvmlUnavailable(f"the NVIDIA driver is not loaded ({exc})") from exc
        except pynvml.NVMLError as exc:
            raise GpuProbeError(f"NVML failed to initialise: {exc}") from exc
        self._nvml = pynvml

    def _call(self, what: str, function: str, *args: Any) -> Any:
        nvml = self._nvml
        if nvml is None:
            raise GpuProbeError("NVML used before init()")
        try:
            return getattr(nvml, function)(*args)
        except nvml.NVMLError as exc:
            raise GpuProbeError(f"NVML failed to read {what}: {exc}") from exc

    def device_count(self) -> int:
        return int(self._call("the GPU count", "nvmlDeviceGetCount"))

    def _handle(self, index: int) -> Any:
        return self._call(f"GPU {index}", "nvmlDeviceGetHandleByIndex", index)

    def device_name(self, index: int) -> str:
        name = self._call(f"GPU {index}'s name", "nvmlDeviceGetName", self._handle(index))
        return name.decode() if isinstance(name, bytes) else str(name)

    def memory(self, index: int) -> tuple[int, int]:
        info = self._call(f"GPU {index}'s memory", "nvmlDeviceGetMemoryInfo", self._handle(index))
        return int(info.total), int(info.used)

    def compute_processes(self, index: int) -> list[tuple[int, int]]:
        processes = self._call(
            f"GPU {index}'s processes", "nvmlDeviceGetComputeProcesses", self._handle(index)
        )
        # usedGpuMemory is None when the driver cannot attribute memory (some containers).
        return [(int(p.pid), int(p.usedGpuMemory or 0)) for p in processes]
