"""The process table through psutil: a process's name and command line, the memory a process tree
holds counted once (proportional set size), and SGLang children left behind by a killed server
(and, for a resume, the server an agent started, found by the marker in its environment).
"""

from __future__ import annotations

from collections.abc import Iterable

import psutil

from bot.errors import RamProbeError

__all__ = [
    "STRAY_PREFIXES",
    "members_pss",
    "process_info",
    "process_tree_pids",
    "process_tree_pss",
    "stray_processes",
]

# Process titles SGLang's children set (setproctitle); they can outlive a killed parent.
STRAY_PREFIXES = ("sglang::scheduler", "sglang::detokenizer")


def process_tree_pids(pid: int) -> set[int]:
    """``pid`` and all its descendants that are alive (empty if ``pid`` is gone)."""
    try:
        root = psutil.Process(pid)
        children = root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return set()
    return {pid, *(child.pid for child in children)}


def process_tree_pss(pid: int) -> int:
    """Proportional set size of ``pid`` and every descendant; 0 when the process is gone."""
    return members_pss(process_tree_pids(pid))


def members_pss(members: Iterable[int]) -> int:
    """Proportional set size of the ``members`` still alive (a tree's, found earlier).

    A page shared by N processes counts 1/N in each one's PSS (``/proc/<pid>/smaps_rollup``),
    so the sum counts it once; a sum of RSS counts it N times (torch's libraries and the shared
    memory of SGLang's scheduler, tokenizer and detokenizer processes). The pages the tree
    shares with processes outside it count in part, as those keep them after a stop.
    """
    total = 0
    for member in members:
        try:
            total += int(psutil.Process(member).memory_full_info().pss)
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
