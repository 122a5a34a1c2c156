"""Tests for the host probe: RAM, cgroup limits, NVML and server processes."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from bot.agent.host._memory import cgroup_memory
from bot.agent.host.nvml import NvmlUnavailable
from bot.agent.host.probe import GpuProcess
from bot.agent.host.system import SystemProbe
from bot.errors import GpuProbeError, RamProbeError
from tests.agent.conftest import PYTHON, Spawn, wait_until


def _cgroup_tree(tmp_path: Path, line: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(line)
    root = tmp_path / "cgroup"
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    root.mkdir(exist_ok=True)
    return proc, root


def test_ram_is_consistent_with_psutil_on_this_machine() -> None:
    """Total and available RAM are positive, ordered, and match psutil's total."""
    ram = SystemProbe().ram()
    assert ram.total_bytes == psutil.virtual_memory().total
    assert 0 < ram.available_bytes <= ram.total_bytes


def test_cgroup_max_means_no_limit(tmp_path: Path) -> None:
    """memory.max "max" is no limit."""
    proc, root = _cgroup_tree(
        tmp_path, "0::/kimi.slice\n", {"kimi.slice/memory.max": "max\n", "x": ""}
    )
    assert cgroup_memory(proc, root) == (None, None)


def test_cgroup_number_is_the_limit_with_current_usage(tmp_path: Path) -> None:
    """A byte count in memory.max is the limit, memory.current the usage."""
    proc, root = _cgroup_tree(
        tmp_path,
        "0::/system.slice/agent.service\n",
        {
            "system.slice/agent.service/memory.max": "483183820800\n",
            "system.slice/agent.service/memory.current": "1234567\n",
        },
    )
    assert cgroup_memory(proc, root) == (483183820800, 1234567)


def test_cgroup_tightest_ancestor_limit_wins(tmp_path: Path) -> None:
    """A parent's smaller memory.max caps a child cgroup with no limit of its own."""
    proc, root = _cgroup_tree(
        tmp_path,
        "0::/a/b\n",
        {
            "a/memory.max": "1000\n",
            "a/memory.current": "400\n",
            "a/b/memory.max": "max\n",
        },
    )
    assert cgroup_memory(proc, root) == (1000, 400)


def test_cgroup_v1_only_has_no_limit(tmp_path: Path) -> None:
    """A cgroup v1 host (no "0::" line) reports no limit."""
    proc, root = _cgroup_tree(tmp_path, "4:memory:/docker/abc\n1:cpu:/\n", {})
    assert cgroup_memory(proc, root) == (None, None)


def test_cgroup_missing_files_mean_no_limit(tmp_path: Path) -> None:
    """No /proc/self/cgroup or no memory.max file gives no limit instead of failing."""
    assert cgroup_memory(tmp_path / "absent", tmp_path) == (None, None)
    proc, root = _cgroup_tree(tmp_path, "0::/\n", {})
    assert cgroup_memory(proc, root) == (None, None)


def test_cgroup_garbage_is_a_ram_probe_error(tmp_path: Path) -> None:
    """An unreadable memory.max value is reported with the file and the value."""
    proc, root = _cgroup_tree(tmp_path, "0::/x\n", {"x/memory.max": "lots\n"})
    with pytest.raises(RamProbeError, match="lots"):
        cgroup_memory(proc, root)


def test_system_probe_ram_carries_the_cgroup_limit(tmp_path: Path) -> None:
    """SystemProbe.ram() reports the limit read from the injected cgroup paths."""
    proc, root = _cgroup_tree(
        tmp_path, "0::/s\n", {"s/memory.max": "5000000000\n", "s/memory.current": "10\n"}
    )
    ram = SystemProbe(proc_self_cgroup=proc, cgroup_root=root).ram()
    assert (ram.cgroup_limit_bytes, ram.cgroup_used_bytes) == (5_000_000_000, 10)


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


@pytest.mark.slow
def test_process_tree_rss_counts_descendants_and_is_zero_when_gone(spawn: Spawn) -> None:
    """A real parent+child tree holds more than the parent alone, and 0 after it exits."""
    parent = spawn(
        PYTHON,
        "-c",
        "import subprocess, sys, time; subprocess.Popen(['sleep', '30']); time.sleep(30)",
    )
    process = psutil.Process(parent.pid)
    wait_until(lambda: len(process.children(recursive=True)) == 1)
    child = process.children(recursive=True)[0]
    probe = SystemProbe()
    tree = probe.process_tree_rss(parent.pid)
    assert tree >= process.memory_info().rss
    assert tree > child.memory_info().rss > 0
    child.kill()
    parent.kill()
    parent.wait(timeout=10)
    assert probe.process_tree_rss(parent.pid) == 0


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
