"""Host memory and processes through psutil and the cgroup v2 files.

The cgroup limit caps what SGLang (0.5.23) and our planner may count as available: a server in a
memory cgroup is killed at ``memory.max`` whatever the host has free. ``/proc/self/cgroup`` on a
cgroup v2 host has one line ``0::/system.slice/kimi-agent.service``; the limit is the smallest
``memory.max`` from that directory up to the root (``max`` = no limit). On cgroup v1 there is no
``0::`` line with a mounted unified hierarchy, and no limit is reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import psutil

from bot.errors import RamProbeError

__all__ = [
    "STRAY_PREFIXES",
    "cgroup_memory",
    "process_info",
    "process_tree_pids",
    "process_tree_rss",
    "ram_totals",
    "stray_processes",
]

# Process titles SGLang's children set (setproctitle); they can outlive a killed parent.
STRAY_PREFIXES = ("sglang::scheduler", "sglang::detokenizer")


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


def process_tree_pids(pid: int) -> set[int]:
    """``pid`` and all its descendants that are alive (empty if ``pid`` is gone)."""
    try:
        root = psutil.Process(pid)
        children = root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return set()
    return {pid, *(child.pid for child in children)}


def process_tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every descendant; 0 when the process is gone."""
    total = 0
    for member in process_tree_pids(pid):
        try:
            total += int(psutil.Process(member).memory_info().rss)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # exited while we were counting: it holds nothing any more
        except psutil.AccessDenied as exc:
            raise RamProbeError(
                f"cannot read the memory of process {member}: run the agent as the server's "
                "owner or as root"
            ) from exc
    return total


def process_info(pid: int) -> tuple[str, list[str]] | None:
    """(name, cmdline) of ``pid``, or None if it is gone."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return process.name(), process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return "?", []


def _looks_like_server_child(name: str, cmdline: list[str]) -> bool:
    # The kernel's comm is cut to 15 characters ("sglang::schedul"); the title lives in argv[0].
    title = cmdline[0] if cmdline else ""
    return title.startswith(STRAY_PREFIXES) or name.startswith("sglang::")


def stray_processes(exclude_pids: Iterable[int]) -> list[tuple[int, str, list[str]]]:
    """(pid, title, cmdline) of alive sglang::scheduler* / sglang::detokenizer processes.

    The trees of ``exclude_pids`` (the running server) are left out.
    """
    excluded: set[int] = set()
    for pid in exclude_pids:
        excluded |= process_tree_pids(pid) | {pid}
    found: list[tuple[int, str, list[str]]] = []
    for process in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        info = process.info
        if info["pid"] in excluded or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        name = info.get("name") or ""
        cmdline = list(info.get("cmdline") or [])
        if _looks_like_server_child(name, cmdline):
            title = cmdline[0] if cmdline and cmdline[0].startswith("sglang::") else name
            found.append((int(info["pid"]), title, cmdline))
    return sorted(found)
