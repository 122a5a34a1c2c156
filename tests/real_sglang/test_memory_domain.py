"""Our cgroup headroom against SGLang 0.5.23's own ``_cgroup_memory_headroom``, on the same files.

SGLang's function (``sglang/srt/mem_cache/host_memory.py``) takes ``proc_root`` and reads
``self/cgroup``, ``self/mountinfo`` and the cgroup files at the mount points mountinfo names, so
each fake tree is laid out with absolute mount points and both readers see the very same bytes.
SGLang runs in the side virtualenv's python (that module imports only psutil and the standard
library beside the package); ours runs here. The figures must agree to the byte.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bot.agent.host._cgroup import parse_membership, read_cgroup_domain
from tests.agent.host._cgroup_trees import V1_FILES, V1_NO_LIMIT_TEXT, V2_FILES, v1_tree, v2_tree
from tests.real_sglang._side import SideVenv

pytestmark = pytest.mark.real_sglang

_SGLANG_HEADROOMS = """
import json, sys
from pathlib import Path
from sglang.srt.mem_cache.host_memory import _cgroup_memory_headroom
print(json.dumps([_cgroup_memory_headroom(proc_root=Path(p)) for p in json.loads(sys.argv[1])]))
"""


def _trees(base: Path) -> dict[str, Path]:
    """The fake /proc of each shape, by name."""
    v2 = "/system.slice/sglang.service"
    protected = {**V2_FILES, "system.slice/sglang.service/rank0/memory.min": "1048576\n"}
    no_high = {**V2_FILES, "system.slice/memory.high": "max\n"}
    unlimited_v1 = {**V1_FILES, "process_api/abc/memory.limit_in_bytes": V1_NO_LIMIT_TEXT}
    container = {
        "memory.max": f"{8 * 1024**3}\n",
        "memory.current": "123456789\n",
        "memory.stat": "active_file 1000\ninactive_file 2000\n",
    }
    return {
        "v2 slice memory.high binds": v2_tree(base / "a", v2, V2_FILES).proc,
        "v2 unit memory.max binds": v2_tree(base / "b", v2, no_high).proc,
        "v2 protected descendant": v2_tree(base / "c", v2, protected).proc,
        "v2 cgroup namespace": v2_tree(base / "d", "/", container, mount_root="/docker/x").proc,
        "v1 14 GiB": v1_tree(base / "e", "/process_api/abc", V1_FILES).proc,
        "v1 no limit": v1_tree(base / "f", "/process_api/abc", unlimited_v1).proc,
    }


def _ours(proc: Path) -> int | None:
    memberships = parse_membership((proc / "self/cgroup").read_text())
    domain = read_cgroup_domain(memberships, (proc / "self/mountinfo").read_text())
    return None if domain is None else domain.headroom_bytes


def test_our_headroom_is_sglangs_to_the_byte(side: SideVenv, tmp_path: Path) -> None:
    """On v1 and v2 trees (a slice's memory.high, a unit's memory.max, a protected descendant,
    a cgroup namespace, v1's limit and its "no limit"), SGLang's headroom and ours are equal."""
    trees = _trees(tmp_path)
    done = subprocess.run(
        [str(side.python), "-c", _SGLANG_HEADROOMS, json.dumps([str(p) for p in trees.values()])],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sglang = dict(zip(trees, json.loads(done.stdout.splitlines()[-1]), strict=True))
    ours = {name: _ours(proc) for name, proc in trees.items()}
    assert ours == sglang
    # The hand-worked figures of the shared trees, so a change on both sides is caught too.
    assert sglang["v2 slice memory.high binds"] == 42_000_000_000
    assert sglang["v1 14 GiB"] == 13_032_385_536
