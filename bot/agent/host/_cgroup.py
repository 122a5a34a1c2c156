"""The memory cgroup a process is charged to, and the headroom it leaves, as SGLang 0.5.23 counts
it.

SGLang (``sglang/srt/mem_cache/host_memory.py``, ``_cgroup_memory_headroom``) reads the process's
``/proc/<pid>/cgroup``, finds each memory hierarchy's directory through ``/proc/self/mountinfo``
and walks from it up to the mount. At every level and for every limit file set there, the level
leaves ``limit - max(0, usage - file pages)``; the cgroup's headroom is the smallest of these:

- cgroup v2 (``0::/system.slice/sglang.service``): ``memory.max`` and ``memory.high``
  (``max`` = none), usage ``memory.current``, file pages ``active_file + inactive_file`` from
  ``memory.stat``; those pages count as reclaimable only when no descendant sets ``memory.min``
  (an unreadable one counts as set);
- cgroup v1 (``4:memory:/process_api/abc``): ``memory.limit_in_bytes``, usage
  ``memory.usage_in_bytes``, file pages ``total_active_file + total_inactive_file``.

A level with no limit file (a hierarchy's root) is passed over. The reader here does the same and
also says which level binds, so a refusal can name it: a process in ``4:memory:/process_api/abc``
whose ``memory.limit_in_bytes`` is 15032385536 (14 GiB) with 232385536 bytes in use besides file
pages gives a domain binding at ``/process_api/abc``, limit 15032385536, headroom 14800000000.

Every path is injected (``root`` is prefixed to the mount points), so tests build the files in a
temporary directory.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from stat import S_ISDIR

from bot.errors import RamProbeError

__all__ = [
    "V1_NO_LIMIT",
    "CgroupLevel",
    "CgroupVersion",
    "MemoryDomain",
    "PlannedLimits",
    "parse_membership",
    "read_cgroup_domain",
]

#: cgroup v1 writes "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB pages);
#: SGLang counts it as a limit like any other, which only matters for display: nothing is that
#: large.
V1_NO_LIMIT = 2**62


class CgroupVersion(StrEnum):
    """Which memory hierarchy a level belongs to: its mountinfo filesystem type."""

    V1 = "cgroup"
    V2 = "cgroup2"


_LIMIT_FILES = {
    CgroupVersion.V2: ("memory.max", "memory.high"),
    CgroupVersion.V1: ("memory.limit_in_bytes",),
}
_USAGE_FILE = {CgroupVersion.V2: "memory.current", CgroupVersion.V1: "memory.usage_in_bytes"}
# File LRU pages; v1's unprefixed counters leave out the descendants its usage includes.
_FILE_PAGES = {
    CgroupVersion.V2: ("active_file", "inactive_file"),
    CgroupVersion.V1: ("total_active_file", "total_inactive_file"),
}


@dataclass(frozen=True)
class CgroupLevel:
    """One level's limit: the cgroup path (``/system.slice``), the file it comes from, the limit,
    the usage less reclaimable file pages, and what it leaves."""

    path: str
    version: CgroupVersion
    limit_file: str
    limit_bytes: int
    usage_bytes: int

    @property
    def headroom_bytes(self) -> int:
        return max(0, self.limit_bytes - self.usage_bytes)


@dataclass(frozen=True)
class PlannedLimits:
    """A cgroup that does not exist yet (a stopped systemd unit's): its path and the limits the
    service manager will set on it (``MemoryMax=``, ``MemoryHigh=``; None is ``infinity``)."""

    path: str
    memory_max: int | None = None
    memory_high: int | None = None


@dataclass(frozen=True)
class MemoryDomain:
    """A process's memory cgroup: its path, the binding level (None when no level sets a
    limit), and its own usage less file pages (what emptying it would free)."""

    cgroup: str
    binding: CgroupLevel | None
    own_usage_bytes: int | None = None
    directory: Path | None = None

    @property
    def headroom_bytes(self) -> int | None:
        """What the cgroup leaves, as SGLang's ``_cgroup_memory_headroom`` returns it."""
        return None if self.binding is None else self.binding.headroom_bytes

    @property
    def limited(self) -> bool:
        """Whether a real limit binds (not v1's "no limit" figure)."""
        return self.binding is not None and self.binding.limit_bytes < V1_NO_LIMIT


def parse_membership(text: str) -> dict[CgroupVersion, PurePosixPath]:
    """``/proc/<pid>/cgroup``'s memory memberships: the ``0::`` line (v2) and the line whose
    controllers include ``memory`` (v1)."""
    memberships: dict[CgroupVersion, PurePosixPath] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            raise RamProbeError(f"cannot read cgroup membership line {line!r}")
        _, controllers, path = parts
        if not controllers:
            memberships[CgroupVersion.V2] = PurePosixPath(path)
        elif "memory" in controllers.split(","):
            memberships[CgroupVersion.V1] = PurePosixPath(path)
    return memberships


def _unescape(value: str) -> str:
    # mountinfo writes a space as \040 (octal escapes).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), value)


def _mounts(
    mountinfo: str, memberships: Mapping[CgroupVersion, PurePosixPath]
) -> list[tuple[CgroupVersion, PurePosixPath, PurePosixPath]]:
    """(version, mount root, mount point) of each memory hierarchy mounted, in mountinfo order."""
    found = []
    for line in mountinfo.splitlines():
        if " - " not in line:
            continue
        before, after = line.split(" - ", 1)
        fields_after = after.split()
        if len(fields_after) < 3:
            continue
        filesystem, _, options = fields_after[:3]
        if filesystem not in (CgroupVersion.V1, CgroupVersion.V2):
            continue
        version = CgroupVersion(filesystem)
        if version not in memberships:
            continue
        if version is CgroupVersion.V1 and "memory" not in options.split(","):
            continue
        fields = before.split()
        found.append(
            (version, PurePosixPath(_unescape(fields[3])), PurePosixPath(_unescape(fields[4])))
        )
    return found


def _relative(membership: PurePosixPath, mount_root: PurePosixPath) -> PurePosixPath | None:
    if membership.is_relative_to(mount_root):
        relative = membership.relative_to(mount_root)
    elif mount_root != PurePosixPath("/"):
        # Inside a cgroup namespace the membership is relative to the namespace's root, while
        # mountinfo still names the host-side subtree that is mounted.
        relative = membership.relative_to("/")
    else:
        return None
    if ".." in relative.parts:
        raise RamProbeError(f"cannot resolve the memory cgroup path {membership}")
    return relative


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise RamProbeError(f"cannot read {path}: {exc}") from exc


def _int(path: Path, text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise RamProbeError(f"{path} holds {text.strip()!r}, expected a byte count") from exc


def _file_pages(directory: Path, version: CgroupVersion) -> int:
    path = directory / "memory.stat"
    stat: dict[str, str] = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        stat[key] = value
    try:
        return sum(_int(path, stat[key]) for key in _FILE_PAGES[version])
    except KeyError as exc:
        raise RamProbeError(f"{path} has no {exc.args[0]} line") from exc


def _has_protected_descendants(directory: Path) -> bool:
    """Whether a descendant sets memory.min (unreadable counts as set): reclaim then may not
    take the file pages SGLang would otherwise count as free."""
    pending = [directory]
    try:
        while pending:
            for child in pending.pop().iterdir():
                if not S_ISDIR(child.stat().st_mode):
                    continue
                if int((child / "memory.min").read_text()) != 0:
                    return True
                pending.append(child)
    except (OSError, ValueError):
        return True
    return False


def _usage_less_file_pages(directory: Path, version: CgroupVersion) -> int:
    usage_path = directory / _USAGE_FILE[version]
    usage = _int(usage_path, _read(usage_path))
    file_pages = _file_pages(directory, version)
    if version is CgroupVersion.V2 and file_pages > 0 and _has_protected_descendants(directory):
        file_pages = 0
    return max(0, usage - file_pages)


def _levels(
    directory: Path, mount: Path, version: CgroupVersion, cgroup_of: PurePosixPath
) -> list[CgroupLevel]:
    """Every limit from ``directory`` up to ``mount``, in that order."""
    levels: list[CgroupLevel] = []
    path = cgroup_of
    while True:
        usage: int | None = None
        for name in _LIMIT_FILES[version]:
            limit_path = directory / name
            try:
                value = limit_path.read_text().strip()
            except FileNotFoundError:
                continue  # a hierarchy's root has no limit files
            except OSError as exc:
                raise RamProbeError(f"cannot read {limit_path}: {exc}") from exc
            if value == "max":
                continue
            if usage is None:
                # A known limit with an unreadable usage is an error, never "no limit".
                usage = _usage_less_file_pages(directory, version)
            levels.append(CgroupLevel(str(path), version, name, _int(limit_path, value), usage))
        if directory == mount:
            return levels
        directory = directory.parent
        path = path.parent


def _binding(levels: list[CgroupLevel]) -> CgroupLevel | None:
    # The first of the smallest: the deepest level, memory.max before memory.high.
    best: CgroupLevel | None = None
    for level in levels:
        if best is None or level.headroom_bytes < best.headroom_bytes:
            best = level
    return best


def read_cgroup_domain(
    memberships: Mapping[CgroupVersion, PurePosixPath],
    mountinfo: str,
    root: Path = Path("/"),
    planned: PlannedLimits | None = None,
) -> MemoryDomain | None:
    """The memory domain of a process in ``memberships`` (see :func:`parse_membership`), with
    the mounts of ``mountinfo`` (the reader's ``/proc/self/mountinfo``) found under ``root``.

    None when the process is in no memory hierarchy. ``planned`` is a cgroup not created yet:
    its limits apply at its path with no usage, and the levels above it are read from the
    nearest directory that exists. Raises ``RamProbeError`` when a membership is in no mounted
    hierarchy or a limit's usage cannot be read.
    """
    if not memberships:
        return None
    levels: list[CgroupLevel] = []
    own: int | None = None
    cgroup = ""
    found: Path | None = None
    for version, mount_root, mount_point in _mounts(mountinfo, memberships):
        membership = memberships[version]
        relative = _relative(membership, mount_root)
        if relative is None:
            continue
        mount = root / mount_point.relative_to("/")
        directory = mount / relative
        cgroup_of = PurePosixPath("/") / relative
        if planned is not None and not directory.is_dir():
            limits = [(n, v) for n, v in (("MemoryMax", planned.memory_max),
                      ("MemoryHigh", planned.memory_high)) if v is not None]  # fmt: skip
            levels += [CgroupLevel(planned.path, version, n, v, 0) for n, v in limits]
            while directory != mount and not directory.is_dir():
                directory, cgroup_of = directory.parent, cgroup_of.parent
            if not directory.is_dir():
                continue
            found = found or directory
            cgroup = cgroup or planned.path
            levels += _levels(directory, mount, version, cgroup_of)
            continue
        if not directory.is_dir():
            continue
        found = found or directory
        cgroup = cgroup or str(PurePosixPath("/") / relative)
        levels += _levels(directory, mount, version, cgroup_of)
        if own is None and directory != mount:
            # Without the memory controller enabled here there is no usage of its own to read.
            with contextlib.suppress(RamProbeError):
                own = _usage_less_file_pages(directory, version)
    if found is None:
        raise RamProbeError(
            "cannot find the memory cgroup "
            + ", ".join(f"{v.value}:{p}" for v, p in memberships.items())
            + " in the mounted cgroup filesystems"
        )
    return MemoryDomain(cgroup, _binding(levels), own, found)
