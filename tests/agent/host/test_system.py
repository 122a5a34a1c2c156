"""Tests for the host probe: RAM, cgroup limits, NVML and server processes."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from bot.agent.host.nvml import NvmlUnavailable
from bot.agent.host.probe import GpuProcess, RamFacts, ServerCgroup, released_within
from bot.agent.host.system import SystemProbe
from bot.errors import GpuProbeError, RamProbeError
from bot.planner import GB
from tests.agent.conftest import PYTHON, Spawn, wait_until
from tests.agent.host._cgroup_trees import (
    GIB,
    V1_FILES,
    V1_NO_LIMIT_TEXT,
    V2_FILES,
    v1_tree,
    v2_tree,
)


def _meminfo(total: int, available: int) -> Callable[[], tuple[int, int]]:
    return lambda: (total, available)


def test_ram_is_consistent_with_psutil_on_this_machine() -> None:
    """Total and available RAM are positive, ordered, and match psutil's total."""
    ram = SystemProbe().ram()
    assert ram.total_bytes == psutil.virtual_memory().total
    assert 0 < ram.available_bytes <= ram.total_bytes
    assert ram.headroom_bytes <= ram.available_bytes


def test_the_servers_cgroup_is_read_not_the_agents(tmp_path: Path) -> None:
    """The agent in kimi-agent.service (no limit), the server pid 4242 in sglang.service: the
    domain is the server's, its slice's memory.high binding at 42e9."""
    files = {
        **V2_FILES,
        "system.slice/kimi-agent.service/memory.max": "max\n",
        "system.slice/kimi-agent.service/memory.min": "0\n",  # unreadable counts as protected
    }
    tree = v2_tree(
        tmp_path,
        "/system.slice/kimi-agent.service",
        files,
        pids={4242: "/system.slice/sglang.service"},
    )
    probe = SystemProbe(proc_root=tree.proc, meminfo=_meminfo(500 * GB, 300 * GB))
    ram = probe.ram(ServerCgroup(pid=4242))
    assert ram.cgroup == "/system.slice/sglang.service"
    assert (ram.cgroup_path, ram.cgroup_limit_file) == ("/system.slice", "memory.high")
    assert (ram.cgroup_limit_bytes, ram.cgroup_used_bytes) == (100 * GB, 58 * GB)
    assert (ram.cgroup_headroom_bytes, ram.headroom_bytes) == (42 * GB, 42 * GB)
    agents = probe.ram()
    assert agents.cgroup == "/system.slice/kimi-agent.service"
    assert agents.cgroup_path == "/system.slice"  # the slice above binds the agent too


def test_a_gone_server_pid_falls_back_to_where_it_would_start(tmp_path: Path) -> None:
    """A pid with no /proc entry (it exited since its state was read) reads the agent's own
    cgroup, where a process-backend server starts again."""
    tree = v1_tree(tmp_path, "/process_api/abc", V1_FILES)
    ram = SystemProbe(proc_root=tree.proc, meminfo=_meminfo(30 * GB, 25 * GB)).ram(
        ServerCgroup(pid=999999)
    )
    assert (ram.cgroup, ram.cgroup_limit_bytes) == ("/process_api/abc", 14 * GIB)


def test_a_stopped_unit_is_planned_with_its_memory_max(tmp_path: Path) -> None:
    """A stopped unit with MemoryMax 8 GiB, its cgroup not created yet: headroom 8 GiB, the
    unit's path and MemoryMax named; the host's 300 GB does not matter."""
    files = {k: v for k, v in V2_FILES.items() if "sglang.service" not in k}
    tree = v2_tree(tmp_path, "/system.slice/kimi-agent.service", files)
    probe = SystemProbe(proc_root=tree.proc, meminfo=_meminfo(500 * GB, 300 * GB))
    ram = probe.ram(
        ServerCgroup(planned_path="/system.slice/sglang.service", planned_max_bytes=8 * GIB)
    )
    assert (ram.cgroup_path, ram.cgroup_limit_file) == ("/system.slice/sglang.service", "MemoryMax")
    assert (ram.cgroup_headroom_bytes, ram.headroom_bytes) == (8 * GIB, 8 * GIB)


def test_v1_unlimited_is_no_limit_and_host_headroom_rules(tmp_path: Path) -> None:
    """v1 "no limit" at every level: no cgroup limit shown, the headroom is MemAvailable."""
    files = {**V1_FILES, "process_api/abc/memory.limit_in_bytes": V1_NO_LIMIT_TEXT}
    tree = v1_tree(tmp_path, "/process_api/abc", files)
    ram = SystemProbe(proc_root=tree.proc, meminfo=_meminfo(30 * GB, 25 * GB)).ram()
    assert (ram.cgroup, ram.cgroup_limit_bytes, ram.cgroup_path) == ("/process_api/abc", None, None)
    assert ram.headroom_bytes == 25 * GB


def test_no_procfs_means_no_cgroup(tmp_path: Path) -> None:
    """Without /proc/self/mountinfo (no procfs) there is no cgroup to honour, not an error."""
    ram = SystemProbe(proc_root=tmp_path / "absent", meminfo=_meminfo(30 * GB, 25 * GB)).ram()
    assert (ram.cgroup, ram.cgroup_limit_bytes, ram.headroom_bytes) == (None, None, 25 * GB)


def test_garbage_in_a_limit_is_a_ram_probe_error(tmp_path: Path) -> None:
    """An unreadable limit is reported with the file and the value."""
    files = {**V1_FILES, "process_api/abc/memory.limit_in_bytes": "lots\n"}
    tree = v1_tree(tmp_path, "/process_api/abc", files)
    with pytest.raises(RamProbeError, match="lots"):
        SystemProbe(proc_root=tree.proc, meminfo=_meminfo(30 * GB, 25 * GB)).ram()


def test_released_is_capped_by_what_the_host_and_the_cgroup_hold() -> None:
    """What a stop frees is at most the host's RAM in use (MemTotal - MemAvailable) and at most
    what the binding cgroup level holds, whatever the count says."""
    host_cap = RamFacts(total_bytes=25 * GB, available_bytes=22 * GB)
    assert released_within(27 * GB, host_cap) == 3 * GB
    cgroup_cap = RamFacts(100 * GB, 50 * GB, cgroup_limit_bytes=14 * GIB, cgroup_used_bytes=GB)
    assert released_within(27 * GB, cgroup_cap) == GB
    assert released_within(GB // 2, cgroup_cap) == GB // 2


@pytest.mark.slow
def test_the_probe_caps_a_real_trees_count_by_the_host(spawn: Spawn) -> None:
    """A real process counted against a host with 1 MB in use is reported releasing 1 MB."""
    child = spawn(PYTHON, "-c", "import time; time.sleep(30)")
    wait_until(lambda: psutil.Process(child.pid).memory_full_info().pss > 2 * 10**6)
    probe = SystemProbe()
    assert probe.released_by_stop(child.pid, RamFacts(10 * GB, 10 * GB - 10**6)) == 10**6
    uncapped = RamFacts(10**15, 10**14)
    assert probe.released_by_stop(child.pid, uncapped) > 10**6


@pytest.mark.slow
def test_a_server_with_a_cgroup_of_its_own_releases_that_cgroups_usage(
    spawn: Spawn, tmp_path: Path
) -> None:
    """The server's tree alone in sglang.service (its cgroup.procs): the stop frees the unit's
    usage less file pages (15e9), not its PSS; with a stranger in the cgroup, the PSS."""
    child = spawn("sleep", "30")
    files = {**V2_FILES, "system.slice/sglang.service/cgroup.procs": f"{child.pid}\n"}
    tree = v2_tree(
        tmp_path,
        "/system.slice/kimi-agent.service",
        {**files, "system.slice/kimi-agent.service/memory.min": "0\n"},
        pids={child.pid: "/system.slice/sglang.service"},
    )
    probe = SystemProbe(proc_root=tree.proc, meminfo=_meminfo(500 * GB, 300 * GB))
    ram = probe.ram(ServerCgroup(pid=child.pid))
    assert ram.server_cgroup_used_bytes == 15 * GB
    assert probe.released_by_stop(child.pid, ram) == 15 * GB
    procs = tree.mount / "system.slice/sglang.service/cgroup.procs"
    procs.write_text(f"{child.pid}\n1\n")
    shared = probe.ram(ServerCgroup(pid=child.pid))
    assert shared.server_cgroup_used_bytes is None
    assert 0 < probe.released_by_stop(child.pid, shared) < GB


def test_no_nvml_on_this_machine_means_unavailable_with_a_reason() -> None:
    """The real pynvml without a GPU driver gives available=False and says why."""
    facts = SystemProbe().gpus()
    assert not facts.available
    assert facts.reason is not None
    assert "NVML" in facts.reason or "driver" in facts.reason
    assert facts.gpus == ()


class FakeNvml:
    """NVML as a GPU host would answer (there is no GPU on a test machine)."""

    def __init__(
        self, processes: dict[int, list[tuple[int, int]]], fail: Exception | None = None
    ) -> None:
        self.processes = processes
        self.fail = fail
        self.init_calls = 0

    def init(self) -> None:
        self.init_calls += 1

    def device_count(self) -> int:
        if self.fail is not None:
            raise self.fail
        return len(self.processes)

    def device_name(self, index: int) -> str:
        return "NVIDIA H200"

    def memory(self, index: int) -> tuple[int, int]:
        return 150_754_820_096, sum(used for _pid, used in self.processes[index])

    def compute_processes(self, index: int) -> list[tuple[int, int]]:
        return self.processes[index]


@pytest.mark.slow
def test_gpu_processes_are_named_through_psutil(spawn: Spawn) -> None:
    """Compute pids from NVML get their process names from psutil (fake NVML: no GPU here)."""
    child = spawn("sleep", "30")
    gone_pid = 2**22 + 7  # above the default pid_max: no such process
    nvml = FakeNvml({0: [(child.pid, 80_000_000_000)], 1: [(gone_pid, 5)]})
    facts = SystemProbe(nvml=nvml).gpus()
    assert facts.available
    assert [gpu.index for gpu in facts.gpus] == [0, 1]
    assert facts.gpus[0].processes == (GpuProcess(child.pid, "sleep", 80_000_000_000),)
    assert facts.gpus[0].memory_used_bytes == 80_000_000_000
    assert facts.gpus[1].processes == (GpuProcess(gone_pid, "?", 5),)


@pytest.mark.slow
def test_nvml_is_initialised_once(spawn: Spawn) -> None:
    """Repeated gpus() calls initialise NVML only the first time (fake NVML: no GPU here)."""
    nvml = FakeNvml({0: []})
    probe = SystemProbe(nvml=nvml)
    probe.gpus()
    probe.gpus()
    assert nvml.init_calls == 1


def test_nvml_unavailable_from_the_library_is_not_a_crash() -> None:
    """A library reporting no driver yields available=False (fake NVML: no GPU here)."""

    class NoDriver(FakeNvml):
        def init(self) -> None:
            raise NvmlUnavailable("the NVIDIA driver is not loaded")

    facts = SystemProbe(nvml=NoDriver({})).gpus()
    assert (facts.available, facts.reason) == (False, "the NVIDIA driver is not loaded")


def test_other_nvml_failures_are_gpu_probe_errors() -> None:
    """A failing NVML call surfaces as GpuProbeError (fake NVML: no GPU here)."""
    nvml = FakeNvml({0: []}, fail=GpuProbeError("NVML failed to read the GPU count: Unknown"))
    with pytest.raises(GpuProbeError, match="GPU count"):
        SystemProbe(nvml=nvml).gpus()


# A parent maps 256 MiB shared, writes every page, forks two children that write every page too,
# and says "ready" once all three have touched it.
_SHARING_TREE = """
import mmap, os, sys, time
size = 256 * 1024 * 1024
shared = mmap.mmap(-1, size, flags=mmap.MAP_SHARED)
def touch():
    for offset in range(0, size, mmap.PAGESIZE):
        shared[offset] = 1
touch()
read_end, write_end = os.pipe()
for _ in range(2):
    if os.fork() == 0:
        touch()
        os.write(write_end, b"x")
        time.sleep(60)
        os._exit(0)
assert len(os.read(read_end, 1) + os.read(read_end, 1)) == 2
print("ready", flush=True)
time.sleep(60)
"""


def _rollup(pid: int, key: str) -> int:
    """``key`` (Pss, Rss) of ``/proc/<pid>/smaps_rollup``, in bytes."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/{pid}/smaps_rollup")


@pytest.mark.slow
def test_a_tree_sharing_memory_is_counted_once(spawn: Spawn) -> None:
    """Three processes sharing one 256 MiB mapping: the tree is reported within 10% of the sum
    of their PSS (about 256 MiB), well under the sum of their RSS (about 768 MiB), and 0 once
    it is gone."""
    parent = spawn(PYTHON, "-c", _SHARING_TREE, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    assert parent.stdout.readline().strip() == b"ready"
    members = [parent.pid, *(c.pid for c in psutil.Process(parent.pid).children(recursive=True))]
    assert len(members) == 3
    probe = SystemProbe()
    reported = probe.released_by_stop(parent.pid, RamFacts(10**15, 10**14))
    pss = sum(_rollup(pid, "Pss") for pid in members)
    rss = sum(_rollup(pid, "Rss") for pid in members)
    assert rss > 3 * 256 * 2**20
    assert abs(reported - pss) <= 0.10 * pss, (reported, pss)
    assert reported < 0.5 * rss, (reported, rss)
    assert 256 * 2**20 <= reported < 320 * 2**20
    for pid in members:
        psutil.Process(pid).kill()
    parent.wait(timeout=10)
    wait_until(
        lambda: (
            not any(
                psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                for p in members
            )
        )
    )
    assert probe.released_by_stop(parent.pid, RamFacts(10**15, 10**14)) == 0


@pytest.mark.slow
def test_stray_scheduler_is_found_unless_it_belongs_to_the_server(spawn: Spawn) -> None:
    """A process titled sglang::scheduler_TP0 is a stray unless in the excluded server tree."""
    stray = spawn("bash", "-c", "exec -a sglang::scheduler_TP0 sleep 30")
    wait_until(lambda: psutil.Process(stray.pid).cmdline()[:1] == ["sglang::scheduler_TP0"])
    probe = SystemProbe()
    found = [info for info in probe.stray_server_processes([]) if info.pid == stray.pid]
    assert len(found) == 1
    assert found[0].name == "sglang::scheduler_TP0"
    assert not [i for i in probe.stray_server_processes([stray.pid]) if i.pid == stray.pid]


@pytest.mark.slow
def test_stray_detokenizer_child_of_excluded_server_is_not_a_stray(spawn: Spawn) -> None:
    """A detokenizer inside the running server's tree is part of the server, not a stray."""
    server = spawn("bash", "-c", "(exec -a sglang::detokenizer sleep 30) & wait")
    tree = psutil.Process(server.pid)

    def detokenizers() -> list[int]:
        return [
            c.pid
            for c in tree.children(recursive=True)
            if c.cmdline()[:1] == ["sglang::detokenizer"]
        ]

    wait_until(lambda: len(detokenizers()) == 1)
    child_pid = detokenizers()[0]
    probe = SystemProbe()
    assert [i for i in probe.stray_server_processes([]) if i.pid == child_pid]
    assert not [i for i in probe.stray_server_processes([server.pid]) if i.pid == child_pid]


V1_MEMORY_MOUNT = Path("/sys/fs/cgroup/memory")
_GROW_ON_GO = (
    "import sys, time\n"
    "sys.stdin.readline()\n"
    "held = bytearray(64 * 1024 * 1024)\n"
    "for i in range(0, len(held), 4096): held[i] = 1\n"
    "print('grown', flush=True)\n"
    "time.sleep(60)\n"
)


def _own_v1_memory_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    pytest.fail(
        "this test needs a cgroup v1 memory hierarchy: /proc/self/cgroup has no memory line"
    )


def _v1_used(directory: Path) -> int:
    usage = int((directory / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (directory / "memory.stat").read_text().splitlines())
    return max(0, usage - int(stat["total_active_file"]) - int(stat["total_inactive_file"]))


@pytest.mark.slow
def test_a_real_v1_memory_cgroup_is_the_servers_domain(spawn: Spawn) -> None:
    """A real child memory cgroup of this process's, limited to 14 GiB, holding a sleeping
    process: the probe reads that process's domain (the child cgroup, 14 GiB, its headroom) and
    takes the cgroup's own usage as what a stop frees (64 MiB touched inside it)."""
    own = _own_v1_memory_cgroup()
    parent = V1_MEMORY_MOUNT / own.lstrip("/")
    name = f"kimi-ops-test-{os.getpid()}"
    directory = parent / name
    try:
        directory.mkdir()
    except OSError as exc:
        pytest.fail(
            f"this test needs a writable cgroup v1 memory hierarchy: mkdir {directory} failed "
            f"({exc}); run it as root on a host whose memory controller is mounted at "
            f"{V1_MEMORY_MOUNT}"
        )
    child = None
    try:
        (directory / "memory.limit_in_bytes").write_text(str(14 * GIB))
        child = spawn(PYTHON, "-c", _GROW_ON_GO, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        (directory / "cgroup.procs").write_text(str(child.pid))
        # Pages are charged where they are first touched: grow once inside the cgroup.
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == b"grown"
        ram = SystemProbe().ram(ServerCgroup(pid=child.pid))
        used = _v1_used(directory)
        assert ram.cgroup == f"{own}/{name}"
        assert (ram.cgroup_path, ram.cgroup_limit_file) == (
            f"{own}/{name}",
            "memory.limit_in_bytes",
        )
        assert ram.cgroup_limit_bytes == 14 * GIB
        assert ram.cgroup_used_bytes == pytest.approx(used, abs=2**20)
        assert ram.cgroup_headroom_bytes == pytest.approx(14 * GIB - used, abs=2**20)
        assert ram.headroom_bytes == min(ram.available_bytes, ram.cgroup_headroom_bytes)
        assert ram.server_cgroup_used_bytes == pytest.approx(used, abs=2**20)
        assert used >= 64 * 2**20
    finally:
        if child is not None:
            child.kill()
            child.wait(timeout=10)
        deadline = time.monotonic() + 10
        while directory.exists():
            try:
                directory.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
