"""Tests for the memory-cgroup reader: SGLang 0.5.23's headroom rule on v1 and v2 trees."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from bot.agent.host._cgroup import (
    CgroupVersion,
    PlannedLimits,
    parse_membership,
    read_cgroup_domain,
)
from bot.errors import RamProbeError
from tests.agent.host._cgroup_trees import GIB, V1_FILES, V2_FILES, CgroupTree, v1_tree, v2_tree


def _read(tree: CgroupTree, pid: str = "self", planned: PlannedLimits | None = None):  # type: ignore[no-untyped-def]
    memberships = parse_membership((tree.proc / pid / "cgroup").read_text())
    mountinfo = (tree.proc / "self/mountinfo").read_text()
    return read_cgroup_domain(memberships, mountinfo, planned=planned)


def test_v2_the_tightest_level_binds_and_memory_high_counts(tmp_path: Path) -> None:
    """v2: the slice's memory.high leaves 100e9 - (60e9 - 2e9) = 42e9, less than the unit's
    memory.max of 64 GiB leaves (68719476736 - 15e9), so the slice binds."""
    domain = _read(v2_tree(tmp_path, "/system.slice/sglang.service", V2_FILES))
    assert domain is not None
    assert domain.cgroup == "/system.slice/sglang.service"
    assert domain.binding is not None
    assert (domain.binding.path, domain.binding.limit_file) == ("/system.slice", "memory.high")
    assert domain.binding.limit_bytes == 100_000_000_000
    assert domain.headroom_bytes == 42_000_000_000
    assert domain.own_usage_bytes == 15_000_000_000


def test_v2_the_units_limit_binds_when_the_slice_has_none(tmp_path: Path) -> None:
    """Without the slice's memory.high, sglang.service's memory.max leaves 53719476736."""
    files = {**V2_FILES, "system.slice/memory.high": "max\n"}
    domain = _read(v2_tree(tmp_path, "/system.slice/sglang.service", files))
    assert domain is not None
    assert domain.binding is not None
    assert (domain.binding.path, domain.binding.limit_file) == (
        "/system.slice/sglang.service",
        "memory.max",
    )
    assert domain.headroom_bytes == 68719476736 - 15_000_000_000


def test_v2_a_protected_descendant_voids_the_file_page_credit(tmp_path: Path) -> None:
    """A child with memory.min set: neither level above it counts its file pages as free, so
    the slice leaves 100e9 - 60e9 = 40e9."""
    files = {**V2_FILES, "system.slice/sglang.service/rank0/memory.min": "1048576\n"}
    domain = _read(v2_tree(tmp_path, "/system.slice/sglang.service", files))
    assert domain is not None
    assert domain.headroom_bytes == 40_000_000_000


def test_v2_an_unreadable_descendant_min_counts_as_protected(tmp_path: Path) -> None:
    """A child cgroup without a readable memory.min counts as protected, as SGLang does."""
    files = {**V2_FILES, "system.slice/sglang.service/rank0/cgroup.procs": ""}
    domain = _read(v2_tree(tmp_path, "/system.slice/sglang.service", files))
    assert domain is not None
    assert domain.headroom_bytes == 40_000_000_000


def test_v2_no_limit_anywhere_is_no_binding(tmp_path: Path) -> None:
    """memory.max and memory.high "max" at every level: the domain has no binding level."""
    files = {
        "system.slice/memory.max": "max\n",
        "system.slice/sglang.service/memory.max": "max\n",
        "system.slice/sglang.service/memory.high": "max\n",
    }
    domain = _read(v2_tree(tmp_path, "/system.slice/sglang.service", files))
    assert domain is not None
    assert (domain.binding, domain.headroom_bytes, domain.limited) == (None, None, False)


def test_v2_in_a_cgroup_namespace_the_mount_root_is_the_container(tmp_path: Path) -> None:
    """A container sees ``0::/`` while mountinfo mounts /docker/abc: the limit at the mount
    (8 GiB, 1 GiB in use) is read."""
    files = {
        "memory.max": f"{8 * GIB}\n",
        "memory.current": f"{GIB}\n",
        "memory.stat": "active_file 0\ninactive_file 0\n",
    }
    domain = _read(v2_tree(tmp_path, "/", files, mount_root="/docker/abc"))
    assert domain is not None
    assert domain.headroom_bytes == 7 * GIB
    assert domain.own_usage_bytes is None  # the mount itself: no cgroup of its own to empty


def test_v1_limit_in_bytes_with_total_file_pages(tmp_path: Path) -> None:
    """v1: 14 GiB limit, 3e9 in use, total_active_file + total_inactive_file = 1e9 (not the
    unprefixed 1 + 2): leaves 15032385536 - 2e9; the levels above say "no limit"."""
    domain = _read(v1_tree(tmp_path, "/process_api/abc", V1_FILES))
    assert domain is not None
    assert domain.binding is not None
    assert domain.binding.version is CgroupVersion.V1
    assert (domain.binding.path, domain.binding.limit_file) == (
        "/process_api/abc",
        "memory.limit_in_bytes",
    )
    assert domain.binding.limit_bytes == 14 * GIB
    assert domain.headroom_bytes == 13_032_385_536
    assert domain.limited


def test_v1_unlimited_everywhere_is_not_a_limit_to_show(tmp_path: Path) -> None:
    """v1's 9223372036854771712 at every level is SGLang's "limit" too (the root, 10e9 in use
    less 3e9 of file pages, leaves the least), but not a real one."""
    files = {**V1_FILES, "process_api/abc/memory.limit_in_bytes": "9223372036854771712\n"}
    domain = _read(v1_tree(tmp_path, "/process_api/abc", files))
    assert domain is not None
    assert domain.binding is not None
    assert domain.binding.path == "/"
    assert domain.headroom_bytes == 9223372036854771712 - 7_000_000_000
    assert not domain.limited


def test_a_planned_unit_takes_its_limits_and_its_slice(tmp_path: Path) -> None:
    """A stopped unit (no directory yet) with MemoryMax 64 GiB: nothing in use in it, and the
    slice above still leaves 42e9, which binds."""
    files = {k: v for k, v in V2_FILES.items() if "sglang.service" not in k}
    tree = v2_tree(tmp_path, "/system.slice/sglang.service", files)
    planned = PlannedLimits("/system.slice/sglang.service", memory_max=64 * GIB)
    domain = _read(tree, planned=planned)
    assert domain is not None
    assert domain.binding is not None
    assert domain.binding.path == "/system.slice"
    assert domain.headroom_bytes == 42_000_000_000
    tight = _read(tree, planned=PlannedLimits(planned.path, memory_high=30 * GIB))
    assert tight is not None
    assert tight.binding is not None
    assert (tight.binding.path, tight.binding.limit_file, tight.headroom_bytes) == (
        "/system.slice/sglang.service",
        "MemoryHigh",
        30 * GIB,
    )


def test_a_membership_in_no_mounted_hierarchy_is_an_error(tmp_path: Path) -> None:
    """A cgroup whose directory is not under any mount is a RamProbeError naming it."""
    tree = v2_tree(tmp_path, "/system.slice/gone.service", V2_FILES)
    with pytest.raises(RamProbeError, match=r"cgroup2:/system.slice/gone.service"):
        _read(tree)


def test_a_limit_without_readable_usage_is_an_error(tmp_path: Path) -> None:
    """A known limit whose memory.current is missing is an error, never "no limit"."""
    files = {k: v for k, v in V2_FILES.items() if k != "system.slice/sglang.service/memory.current"}
    with pytest.raises(RamProbeError, match=r"memory\.current"):
        _read(v2_tree(tmp_path, "/system.slice/sglang.service", files))


def test_a_limit_that_is_not_a_number_is_an_error(tmp_path: Path) -> None:
    """memory.max holding "lots" is a RamProbeError naming the file and the value."""
    files = {**V2_FILES, "system.slice/sglang.service/memory.max": "lots\n"}
    with pytest.raises(RamProbeError, match=r"memory.max holds 'lots'"):
        _read(v2_tree(tmp_path, "/system.slice/sglang.service", files))


def test_membership_lines() -> None:
    """The memory line of v1 and the 0:: line of v2 are read; other controllers are not."""
    text = "9:name=systemd:/\n4:memory,blkio:/a\n1:cpu:/b\n0::/c\n"
    assert parse_membership(text) == {
        CgroupVersion.V1: PurePosixPath("/a"),
        CgroupVersion.V2: PurePosixPath("/c"),
    }
    with pytest.raises(RamProbeError, match="cannot read cgroup membership line"):
        parse_membership("garbage\n")


def test_escaped_mount_points_are_unescaped(tmp_path: Path) -> None:
    """A mount point with a space (mountinfo's \\040) is found."""
    base = tmp_path / "with space"
    tree = v2_tree(base, "/system.slice/sglang.service", V2_FILES)
    memberships = parse_membership((tree.proc / "self/cgroup").read_text())
    mountinfo = (tree.proc / "self/mountinfo").read_text().replace(" space", "\\040space")
    domain = read_cgroup_domain(memberships, mountinfo)
    assert domain is not None
    assert domain.headroom_bytes == 42_000_000_000
