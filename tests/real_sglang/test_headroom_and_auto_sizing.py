"""The real SGLang 0.5.23 on CPU sizing its host pool by itself: auto-sizing (neither ratio nor
size given), and inside a cgroup v1 memory cgroup, each line it logs checked against the rule
docs/sglang.md draws and against the cgroup's own files.

SGLang logs, once per rank, just before it builds the host pool::

    HiCache memory headroom: host 19.5 GiB, cgroup 14.3 GiB
    HiCache auto-sizing: ratio 2.000 -> 2.000; 3.4 GiB host memory per rank (fraction 0.80,
    1 ranks on this host), host pools 0.0 GiB.

The headroom line appears whenever a memory cgroup applies: on this machine the agent's own v1
cgroup has a "limit" of 9223372036854771712 bytes (v1's unlimited), which SGLang counts as one.
The simulator prints both lines the same way (``bot.sim._lines``); each test also checks that.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.sim import _lines
from tests.real_sglang._agent import stop_process_tree
from tests.real_sglang._launch import READY_LINE
from tests.real_sglang._side import DEVICE_TOKENS, SideVenv, free_port, server_argv
from tests.real_sglang.conftest import START_TIMEOUT_S, clean_environ, server_environ

pytestmark = pytest.mark.real_sglang

GIB = 1024**3
RESERVE_GIB = 10.0
KV_BYTES_PER_TOKEN = 256  # the tiny model: docs of tests/real_sglang/_side.py
# "HiCache memory headroom: host 19.5 GiB, cgroup 8589934588.0 GiB"
HEADROOM = re.compile(r"HiCache memory headroom: host ([\d.]+) GiB, cgroup ([\d.]+) GiB")
# "HiCache auto-sizing: ratio 2.000 -> 2.000; 7.6 GiB host memory per rank (fraction 0.80, ..."
AUTO = re.compile(
    r"HiCache auto-sizing: ratio ([\d.]+) -> ([\d.]+); ([\d.]+) GiB host memory per rank "
    r"\(fraction ([\d.]+), (\d+) ranks on this host\), host pools ([\d.]+) GiB\."
)
# "Allocating kv hierarchical KV host pool: 32769 tokens, 0.01 GB host memory."
POOL = re.compile(r"Allocating kv hierarchical KV host pool: (\d+) tokens")
V1_MOUNT = Path("/sys/fs/cgroup/memory")
CGROUP_LIMIT = 16 * GIB


def _memory_cgroup() -> Path:
    """This process's cgroup v1 memory directory (``4:memory:/process_api/<id>``)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return V1_MOUNT / path.lstrip("/")
    raise AssertionError("this process is in no cgroup v1 memory hierarchy")


@contextlib.contextmanager
def child_cgroup(limit: int) -> Iterator[Path]:
    """A child v1 memory cgroup of ours limited to ``limit`` bytes, removed afterwards."""
    directory = _memory_cgroup() / f"kimi-test-{time.monotonic_ns()}"
    directory.mkdir()
    try:
        (directory / "memory.limit_in_bytes").write_text(str(limit))
        yield directory
    finally:
        deadline = time.monotonic() + 30
        while (directory / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        directory.rmdir()


def cgroup_headroom_from_files(directory: Path) -> int:
    """SGLang 0.5.23's cgroup headroom read here from the files (v1): at every level up to the
    mount, limit - (usage - file pages), usage and file pages taken at the first limited level."""
    usage: int | None = None
    headroom: int | None = None
    while True:
        limit_file = directory / "memory.limit_in_bytes"
        if limit_file.is_file():
            limit = int(limit_file.read_text())
            if usage is None:
                lines = (directory / "memory.stat").read_text().splitlines()
                stat = {key: int(value) for key, value in map(str.split, lines)}
                usage = int((directory / "memory.usage_in_bytes").read_text())
                usage = max(0, usage - stat["total_active_file"] - stat["total_inactive_file"])
            room = max(0, limit - usage)
            headroom = room if headroom is None else min(headroom, room)
        if directory == V1_MOUNT:
            break
        directory = directory.parent
    assert headroom is not None
    return headroom


@contextlib.contextmanager
def serving(argv: list[str], log_file: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The real server started with ``argv``, until ready; its tree stopped afterwards."""
    with log_file.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_environ(clean_environ()),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY_LINE not in log_file.read_text(errors="replace"):
            tail = log_file.read_text(errors="replace")[-3000:]
            assert process.poll() is None, f"the real server exited {process.returncode}:\n{tail}"
            assert time.monotonic() < deadline, f"not ready in {START_TIMEOUT_S} s:\n{tail}"
            time.sleep(0.2)
        yield process
    finally:
        stop_process_tree(process.pid)
        process.wait(timeout=30)


def auto_sizing_of(log: str) -> tuple[float, float, float, float, int, float]:
    matches = AUTO.findall(log)
    assert len(matches) == 1, f"expected one auto-sizing line (one rank):\n{log[-3000:]}"
    requested, ratio, budget, fraction, ranks, pools = matches[0]
    return float(requested), float(ratio), float(budget), float(fraction), int(ranks), float(pools)


def test_without_ratio_or_size_the_real_server_auto_sizes_by_sglangs_rule(
    side: SideVenv, tmp_path: Path
) -> None:
    """Neither --hicache-ratio nor --hicache-size: SGLang logs its headroom and auto-sizing
    lines; the budget is 0.8 x (headroom - 10 GiB) for its one rank, the ratio stays 2.0 (the
    tiny pool fits), the pool holds int(16,384 x 2) + 1 tokens, and the simulator prints both
    lines in the same shape."""
    argv = server_argv(side.python, side.model, free_port(), "--enable-hierarchical-cache")
    with serving(argv, tmp_path / "server.log"):
        pass
    log = (tmp_path / "server.log").read_text(errors="replace")
    (host_gib, cgroup_gib), *_ = [(float(h), float(c)) for h, c in HEADROOM.findall(log)]
    requested, ratio, budget, fraction, ranks, pools = auto_sizing_of(log)
    assert (requested, fraction, ranks) == (2.0, 0.8, 1)
    assert budget == pytest.approx((min(host_gib, cgroup_gib) - RESERVE_GIB) * 0.8, abs=0.1)
    device = (DEVICE_TOKENS + 1) * KV_BYTES_PER_TOKEN
    assert ratio == min(2.0, round(budget * GIB * 0.95 / device, 3))
    assert pools == pytest.approx(device * ratio / GIB, abs=0.05)
    assert [int(t) for t in POOL.findall(log)] == [int(DEVICE_TOKENS * ratio) + 1]
    # The simulator's lines, filled with the real figures, are the real lines.
    assert _lines.auto_sizing(requested, ratio, budget, fraction, ranks, pools) in log
    print(f"real auto-sizing: headroom host {host_gib} GiB, cgroup {cgroup_gib} GiB; {budget} GiB")


def test_in_a_v1_memory_cgroup_the_logged_headroom_is_the_cgroups(
    side: SideVenv, tmp_path: Path
) -> None:
    """The real server started inside a child v1 memory cgroup of 16 GiB (its launcher joins it
    before exec): the cgroup headroom it logs is limit - (usage - file pages) read from the
    cgroup's files while it serves (within 0.3 GiB: the usage moves), below the host's, and its
    auto-sizing budget is 0.8 x (that headroom - 10 GiB)."""
    with child_cgroup(CGROUP_LIMIT) as cgroup:
        join = f'echo $$ > {cgroup / "cgroup.procs"} && exec "$@"'
        argv = server_argv(side.python, side.model, free_port(), "--enable-hierarchical-cache")
        with serving(["/bin/sh", "-c", join, "sh", *argv], tmp_path / "server.log") as server:
            pids = {int(p) for p in (cgroup / "cgroup.procs").read_text().split()}
            assert server.pid in pids
            ours = cgroup_headroom_from_files(cgroup) / GIB
        log = (tmp_path / "server.log").read_text(errors="replace")
    (host_gib, cgroup_gib), *_ = [(float(h), float(c)) for h, c in HEADROOM.findall(log)]
    assert cgroup_gib < host_gib
    assert cgroup_gib < CGROUP_LIMIT / GIB
    assert cgroup_gib == pytest.approx(ours, abs=0.3)
    _, _, budget, _, _, _ = auto_sizing_of(log)
    assert budget == pytest.approx((cgroup_gib - RESERVE_GIB) * 0.8, abs=0.1)
    # The simulator's line, filled with the real figures, is the real line.
    assert _lines.memory_headroom(round(host_gib * GIB), round(cgroup_gib * GIB)) in log
    print(f"real cgroup headroom: logged {cgroup_gib} GiB, from the files {ours:.2f} GiB")
