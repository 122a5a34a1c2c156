"""Host memory through psutil and the cgroup v2 files.

The cgroup limit caps what SGLang (0.5.23) and our planner may count as available: a server in a
memory cgroup is killed at ``memory.max`` whatever the host has free. ``/proc/self/cgroup`` on a
cgroup v2 host has one line ``0::/system.slice/kimi-agent.service``; the limit is the smallest
``memory.max`` from that directory up to the root (``max`` = no limit). On cgroup v1 there is no
``0::`` line with a mounted unified hierarchy, and no limit is reported.
"""

from __future__ import annotations

from pathlib import Path

import psutil

from bot.errors import RamProbeError

__all__ = ["cgroup_memory", "ram_totals"]


def ram_totals() -> tuple[int, int]:
    """(total, available) bytes of host RAM as psutil reports them."""
    try:
        memory = psutil.virtual_memory()
    except (OSError, psutil.Error) as exc:
        raise RamProbeError(f"psutil could not read host memory: {exc}") from exc
    return int(memory.total), int(memory.available)


def cgroup_memory(proc_self_cgroup: Path, cgroup_root: Path) -> tuple[int | None, int | None]:
    """(limit, used) bytes of this process's cgroup v2, or (None, None) when there is no limit.

    ``proc_self_cgroup`` is normally ``/proc/self/cgroup`` and ``cgroup_root`` ``/sys/fs/cgroup``.
    """
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return None, None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    if relative is None:
        return None, None  # cgroup v1 only
    directory = cgroup_root / relative.strip().lstrip("/")
    best: tuple[int, Path] | None = None
    while True:
        limit = _read_limit(directory / "memory.max")
        if limit is not None and (best is None or limit < best[0]):
            best = (limit, directory)
        if directory == cgroup_root or cgroup_root not in directory.parents:
            break
        directory = directory.parent
    if best is None:
        return None, None
    return best[0], _read_int(best[1] / "memory.current")


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise RamProbeError(f"{path} holds {text!r}, expected a byte count or 'max'") from exc


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
