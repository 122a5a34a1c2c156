"""Fake cgroup hierarchies on a temporary directory: a ``proc`` directory (``self/cgroup``,
``self/mountinfo``, ``<pid>/cgroup``) and the cgroup files, mounted at absolute paths inside it,
so SGLang's ``_cgroup_memory_headroom(proc_root=...)`` and our reader read the same files.

The figures of ``V2_FILES`` and ``V1_FILES`` are the ones the tests work out by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GIB",
    "V1_FILES",
    "V1_NO_LIMIT_TEXT",
    "V2_FILES",
    "CgroupTree",
    "v1_tree",
    "v2_tree",
]

GIB = 1024**3
#: What cgroup v1 writes for "no limit" (PAGE_COUNTER_MAX pages of 4 KiB).
V1_NO_LIMIT_TEXT = "9223372036854771712\n"


@dataclass(frozen=True)
class CgroupTree:
    """A fake ``/proc`` and the mount point of the memory hierarchy."""

    proc: Path
    mount: Path


def _write(base: Path, files: Mapping[str, str]) -> None:
    for relative, content in files.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def _proc(base: Path, self_cgroup: str, mountinfo: str, pids: Mapping[int, str]) -> Path:
    proc = base / "proc"
    _write(proc, {"self/cgroup": self_cgroup, "self/mountinfo": mountinfo})
    _write(proc, {f"{pid}/cgroup": text for pid, text in pids.items()})
    return proc


def v2_tree(
    base: Path,
    membership: str,
    files: Mapping[str, str],
    pids: Mapping[int, str] | None = None,
    mount_root: str = "/",
) -> CgroupTree:
    """A cgroup v2 host: the unified hierarchy at ``<base>/sys/fs/cgroup``; ``files`` relative
    to it; ``/proc/self/cgroup`` is ``0::<membership>``; ``pids`` give other processes'."""
    mount = base / "sys/fs/cgroup"
    mount.mkdir(parents=True, exist_ok=True)
    _write(mount, files)
    mountinfo = (
        f"23 1 8:1 / {base} rw,relatime - ext4 /dev/sda1 rw\n"
        f"31 23 0:28 {mount_root} {mount} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n"
    )
    proc = _proc(
        base, f"0::{membership}\n", mountinfo, {p: f"0::{m}\n" for p, m in (pids or {}).items()}
    )
    return CgroupTree(proc, mount)


def v1_tree(
    base: Path,
    membership: str,
    files: Mapping[str, str],
    pids: Mapping[int, str] | None = None,
) -> CgroupTree:
    """A cgroup v1 host shaped as this machine: each controller its own hierarchy under
    ``<base>/sys/fs/cgroup``, memory at ``memory/``, an empty unified one at ``unified/``."""
    top = base / "sys/fs/cgroup"
    mount = top / "memory"
    for name in ("cpu", "memory", "unified"):
        (top / name).mkdir(parents=True, exist_ok=True)
    _write(mount, files)
    mountinfo = (
        f"31 23 0:28 / {top} rw,relatime - tmpfs tmpfs rw,mode=755\n"
        f"32 31 0:29 / {top / 'cpu'} rw,relatime - cgroup cgroup rw,cpu\n"
        f"35 31 0:32 / {mount} rw,relatime - cgroup cgroup rw,memory\n"
        f"41 31 0:38 / {top / 'unified'} rw,relatime - cgroup2 cgroup2 rw\n"
    )

    def lines(path: str) -> str:
        return f"9:name=systemd:/\n4:memory:{path}\n1:cpu:/\n0::/\n"

    proc = _proc(base, lines(membership), mountinfo, {p: lines(m) for p, m in (pids or {}).items()})
    return CgroupTree(proc, mount)


def _v2_stat(active: int, inactive: int) -> str:
    return f"anon 1000\nfile {active + inactive}\nactive_file {active}\ninactive_file {inactive}\n"


def _v1_stat(active: int, inactive: int) -> str:
    # The unprefixed counters are this level's alone; SGLang reads the total_ ones.
    return (
        f"cache 7\nrss 9\nactive_file 1\ninactive_file 2\n"
        f"total_cache {active + inactive}\ntotal_active_file {active}\n"
        f"total_inactive_file {inactive}\n"
    )


#: A systemd unit under a slice, cgroup v2. sglang.service: memory.max 64 GiB, 20 GB in use, 5 GB
#: of it file pages: leaves 68719476736 - 15e9 = 53719476736. system.slice: memory.high
#: 100 GB, 60 GB in use, 2 GB file pages: leaves 42e9, the least.
V2_FILES = {
    "system.slice/memory.max": "max\n",
    "system.slice/memory.high": "100000000000\n",
    "system.slice/memory.current": "60000000000\n",
    "system.slice/memory.stat": _v2_stat(1_000_000_000, 1_000_000_000),
    "system.slice/memory.min": "0\n",
    "system.slice/sglang.service/memory.max": "68719476736\n",
    "system.slice/sglang.service/memory.high": "max\n",
    "system.slice/sglang.service/memory.current": "20000000000\n",
    "system.slice/sglang.service/memory.stat": _v2_stat(3_000_000_000, 2_000_000_000),
    "system.slice/sglang.service/memory.min": "0\n",
    "system.slice/sglang.service/cgroup.procs": "",
}

#: This machine's shape, cgroup v1: /process_api/abc limited to 14 GiB with 3e9 in use, 1e9 of
#: it file pages (total_*): leaves 15032385536 - 2e9 = 13032385536. Its parent and the root
#: say "no limit".
V1_FILES = {
    "memory.limit_in_bytes": V1_NO_LIMIT_TEXT,
    "memory.usage_in_bytes": "10000000000\n",
    "memory.stat": _v1_stat(2_000_000_000, 1_000_000_000),
    "process_api/memory.limit_in_bytes": V1_NO_LIMIT_TEXT,
    "process_api/memory.usage_in_bytes": "5000000000\n",
    "process_api/memory.stat": _v1_stat(500_000_000, 500_000_000),
    "process_api/abc/memory.limit_in_bytes": f"{14 * GIB}\n",
    "process_api/abc/memory.usage_in_bytes": "3000000000\n",
    "process_api/abc/memory.stat": _v1_stat(400_000_000, 600_000_000),
    "process_api/abc/cgroup.procs": "",
}
