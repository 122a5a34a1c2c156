"""Host memory through psutil: MemTotal and MemAvailable (the cgroups are ``_cgroup``'s)."""

from __future__ import annotations

import psutil

from bot.errors import RamProbeError

__all__ = ["ram_totals"]


def ram_totals() -> tuple[int, int]:
    """(total, available) bytes of host RAM as psutil reports them."""
    try:
        memory = psutil.virtual_memory()
    except (OSError, psutil.Error) as exc:
        raise RamProbeError(f"psutil could not read host memory: {exc}") from exc
    return int(memory.total), int(memory.available)
