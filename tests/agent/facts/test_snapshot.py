"""Tests for the facts service: status and plans on the real simulator.

The server is the simulator (``python -m bot.sim``) started by the real process backend; host
facts come from the simulator's profile through ``probe = "sim"`` (the field notes' 449 GB host
with 8 GPUs), so the figures are the field notes' own. Expected numbers are computed here from
SGLANG_FACTS.md's formulas and the profile, not by the code under test.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from bot.agent.cmdline import HiCacheSetting, Topology
from bot.agent.config import AgentSettings
from bot.agent.control.protocol import ServerControl, ServerProcessState
from bot.agent.facts._sources import LOG_RUN_BYTES, report_of_text
from bot.agent.facts.snapshot import FactsService, fingerprint_of
from bot.agent.host.probe import ServerCgroup
from bot.agent.host.system import SystemProbe
from bot.agent.http.status import status_body
from bot.agent.service import make_control, make_probe
from bot.agent.sglang_client import SGLangClient
from bot.agent.state.agent_state import AgentState
from bot.clock import SystemClock
from bot.errors import BackendError, GpuProbeError
from bot.planner import ChangeRequest
from bot.vocab import ServerState
from tests.agent._api_helpers import SMALL, agent_settings
from tests.agent.conftest import wait_until

GB = 1e9
GIB = 1024**3
# The kimi-k25-8gpu profile (bot/sim/profiles): 449 GB total, 445 GB available, 8 x 96 GiB,
# 159,274 device tokens at the default mem fraction 0.88, 70,272 KV bytes per token (MLA).
DEVICE_TOKENS = 159_274
BYTES_PER_TOKEN = 70_272
RESERVE_GB = 10 * GIB / GB


@dataclass
class Rig:
    settings: AgentSettings
    control: ServerControl
    facts: FactsService
    state: AgentState

    def start(self) -> None:
        """Start the simulator and wait (bounded) until /health answers 200."""
        self.control.start("test:1")
        client = SGLangClient(self.settings.server_url)
        try:
            wait_until(lambda: client.health() == 200, timeout_s=60)
        finally:
            client.close()


def _rig(settings: AgentSettings) -> tuple[Rig, SGLangClient]:
    clock = SystemClock()
    control = make_control(settings, clock)
    sglang = SGLangClient(settings.server_url)
    state = AgentState(settings.state_dir)
    facts = FactsService(settings, make_probe(settings), control, sglang, state, clock)
    return Rig(settings, control, facts, state), sglang


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    """Facts for an agent on the simulated 449 GB host; the server is stopped afterwards."""
    built, sglang = _rig(agent_settings(tmp_path))
    yield built
    built.control.stop(grace_s=5)
    sglang.close()
    built.state.close()


@pytest.mark.slow
def test_stopped_server_status_reports_the_simulated_host(rig: Rig) -> None:
    """With no server running, status shows it stopped and the 449 GB, 8-GPU simulated host."""
    body = status_body(rig.facts.snapshot(), None)
    assert body["server"]["state"] == "stopped"
    assert body["server"]["pid"] is None
    assert body["ram"]["total_gb"] == 449.0
    assert body["ram"]["available_gb"] == 445.0
    assert body["ram"]["server_held_gb"] == 0.0
    assert body["gpus"]["available"] is True
    devices = body["gpus"]["devices"]
    assert [gpu["index"] for gpu in devices] == list(range(8))
    assert devices[0]["memory_total_gb"] == round(96 * GIB / GB, 2)
    assert body["config"]["effective"] == "ratio 2 x device pool"
    assert body["config"]["enable_hierarchical_cache"] is True
    assert body["capacity"]["ranks"] == 8
    assert body["capacity"]["device_tokens"] is None
    assert body["operation"] is None
    assert body["problems"] == []


@pytest.mark.slow
def test_running_server_status_reads_server_info_and_sizes_the_pool(rig: Rig) -> None:
    """A ready server is "running" with its version, pid, device pool and host pool figures."""
    rig.start()
    body = status_body(rig.facts.snapshot(), None)
    server = body["server"]
    assert server["state"] == "running"
    assert server["health_code"] == 200
    assert server["version"] == "0.5.9"
    assert server["pid"] == rig.control.status().main_pid
    assert server["uptime_s"] >= 0
    capacity = body["capacity"]
    assert capacity["device_tokens"] == DEVICE_TOKENS
    # /server_info gives the KV size in GiB to two decimals: within 0.05% of the model's figure.
    assert capacity["kv_bytes_per_token"] == pytest.approx(BYTES_PER_TOKEN, rel=5e-4)
    assert capacity["host_tokens_per_rank"] == DEVICE_TOKENS * 2 + 1
    expected_gb = (DEVICE_TOKENS * 2 + 1) * BYTES_PER_TOKEN / GB
    assert capacity["host_gb_per_rank"] == pytest.approx(expected_gb, rel=1e-3)
    ram = body["ram"]
    # What the running server holds is what its restart gives back: together, the idle host's.
    assert ram["server_held_gb"] > 0
    assert ram["available_gb"] + ram["server_held_gb"] == pytest.approx(445.0, abs=0.05)


@pytest.mark.slow
def test_fingerprint_is_stable_and_changes_with_the_server(rig: Rig) -> None:
    """Two reads agree; a restart (new pid) and a rewritten HiCache flag each change it."""
    rig.start()
    first = rig.facts.snapshot().fingerprint
    assert rig.facts.snapshot().fingerprint == first
    rig.control.stop(grace_s=5)
    rig.start()
    restarted = rig.facts.snapshot().fingerprint
    assert restarted != first
    argv = rig.control.read_command()
    rig.control.write_command([*argv[:-1], "4"])  # --hicache-ratio 2 -> 4
    assert rig.facts.snapshot().fingerprint != restarted


@pytest.mark.slow
def test_plan_size_300_is_refused_with_the_arithmetic(rig: Rig) -> None:
    """The field notes' 8 x 300 GB request is refused, the reason showing 2400 GB vs the budget."""
    rig.start()
    plan, fingerprint = rig.facts.plan(ChangeRequest(size_gb=300))
    assert not plan.fits
    budget = 445.0 - RESERVE_GB - 40.0
    assert "8 ranks x 300.00 GB = 2400.0 GB" in plan.reason
    assert f"leaves {budget:.1f} GB" in plan.reason
    assert fingerprint == rig.facts.snapshot().fingerprint


@pytest.mark.slow
def test_plan_size_48_fits(rig: Rig) -> None:
    """48 GB per rank (384 GB on 8 ranks) fits the 449 GB host, as it did in the field notes."""
    rig.start()
    plan, _ = rig.facts.plan(ChangeRequest(size_gb=48))
    assert plan.fits
    assert plan.total_gb == pytest.approx(384.0, abs=0.1)


@pytest.mark.slow
def test_plan_ratio_4_gives_44_77_gb_per_rank(rig: Rig) -> None:
    """Ratio 4 on the kimi profile is ~44.77 GB per rank (not the operator's 41.6 GB)."""
    rig.start()
    plan, _ = rig.facts.plan(ChangeRequest(ratio=4))
    expected = (DEVICE_TOKENS * 4 + 1) * BYTES_PER_TOKEN / GB  # 44.770 GB
    assert plan.per_rank_gb == pytest.approx(expected, rel=1e-3)
    assert plan.fits


def test_gpu_facts_unavailable_on_this_machine_carry_the_reason(tmp_path: Path) -> None:
    """With the real host probe on a machine without NVML, GPUs are unavailable with a reason."""
    built, sglang = _rig(agent_settings(tmp_path, probe="host"))
    try:
        body = status_body(built.facts.snapshot(), None)
    finally:
        sglang.close()
        built.state.close()
    assert body["gpus"]["available"] is False
    assert body["gpus"]["reason"]
    assert body["gpus"]["devices"] == []
    assert body["ram"]["total_gb"] > 0


def test_unreadable_command_is_a_problem_in_status_and_an_error_for_plans(
    tmp_path: Path,
) -> None:
    """A corrupt stored command leaves config empty with the reason, and a plan raises it."""
    built, sglang = _rig(agent_settings(tmp_path, profile=SMALL))
    try:
        built.control.read_command()  # stores the command
        (built.settings.state_dir / "command.json").write_text(json.dumps({"argv": 7}))
        body = status_body(built.facts.snapshot(), None)
        assert body["config"]["effective"] is None
        assert any("command.json" in problem for problem in body["problems"])
        with pytest.raises(BackendError, match=r"command\.json"):
            built.facts.plan(ChangeRequest(ratio=4))
    finally:
        sglang.close()
        built.state.close()


def test_local_ranks_counts_scheduler_processes() -> None:
    """TP x PP x DP ranks (DP attention splits TP instead), divided over the nodes."""
    assert Topology(tp=8).local_ranks == 8
    assert Topology(tp=4, dp=2).local_ranks == 8
    assert Topology(tp=8, dp=8, dp_attention=True).local_ranks == 8
    assert Topology(tp=16, nnodes=2).local_ranks == 8
    assert Topology(tp=4, pp=2).local_ranks == 8


def test_fingerprint_names_config_pid_start_and_version() -> None:
    """Each input changes the fingerprint; a ratio beside a winning size does not."""
    base = fingerprint_of(HiCacheSetting(enabled=True, size_gb=48), 10, 100.0, "0.5.9")
    assert len(base) == 16
    assert fingerprint_of(HiCacheSetting(True, ratio=2.0, size_gb=48), 10, 100.0, "0.5.9") == base
    assert fingerprint_of(HiCacheSetting(enabled=True, size_gb=44), 10, 100.0, "0.5.9") != base
    assert fingerprint_of(HiCacheSetting(enabled=True, size_gb=48), 11, 100.0, "0.5.9") != base
    assert fingerprint_of(HiCacheSetting(enabled=True, size_gb=48), 10, 101.0, "0.5.9") != base
    assert fingerprint_of(HiCacheSetting(enabled=True, size_gb=48), 10, 100.0, "0.5.23") != base


@pytest.mark.slow
def test_stopped_server_capacity_comes_from_its_startup_log(rig: Rig) -> None:
    """After the server stops, the device and host pools are read from its last startup log,
    so a ratio can still be planned (~44.77 GB per rank for ratio 4)."""
    rig.start()
    rig.control.stop(grace_s=5)
    capacity = status_body(rig.facts.snapshot(), None)["capacity"]
    assert capacity["source"] == "startup_log"
    assert capacity["device_tokens"] == DEVICE_TOKENS
    # "Allocating 22.39 GB host memory": (2 x 159,274 + 1) x 70,272 B, printed to 2 decimals.
    assert capacity["host_gb_per_rank"] == round((DEVICE_TOKENS * 2 + 1) * BYTES_PER_TOKEN / GB, 2)
    plan, _ = rig.facts.plan(ChangeRequest(ratio=4))
    expected = (DEVICE_TOKENS * 4 + 1) * BYTES_PER_TOKEN / GB
    assert plan.per_rank_gb == pytest.approx(expected, rel=1e-3)


class _Nvml:
    """A stand-in for NVML (this machine has no GPU): two 96 GiB GPUs, this test process holding
    2 GiB on GPU 0, or a lost GPU when ``lost`` is set."""

    def __init__(self, lost: bool = False) -> None:
        self.lost = lost

    def init(self) -> None:
        pass

    def device_count(self) -> int:
        return 2

    def device_name(self, index: int) -> str:
        return "NVIDIA RTX PRO 6000 Blackwell"

    def memory(self, index: int) -> tuple[int, int]:
        if self.lost and index == 1:
            raise GpuProbeError("NVML nvmlDeviceGetMemoryInfo on GPU 1: GPU is lost")
        return 96 * GIB, (2 * GIB if index == 0 else 0)

    def compute_processes(self, index: int) -> list[tuple[int, int]]:
        return [(os.getpid(), 2 * GIB)] if index == 0 else []


def _facts_with_nvml(tmp_path: Path, nvml: _Nvml) -> tuple[FactsService, AgentState]:
    settings = agent_settings(tmp_path, profile=SMALL, probe="host")
    clock = SystemClock()
    state = AgentState(settings.state_dir)
    facts = FactsService(
        settings,
        SystemProbe(nvml=nvml),
        make_control(settings, clock),
        SGLangClient(settings.server_url),
        state,
        clock,
    )
    return facts, state


def test_gpu_devices_and_their_processes_are_laid_out_in_gb(tmp_path: Path) -> None:
    """Each GPU shows its memory in GB and bytes, and each compute process its pid, its name
    (from psutil: here this very process) and its memory."""
    facts, state = _facts_with_nvml(tmp_path, _Nvml())
    try:
        gpus = status_body(facts.snapshot(), None)["gpus"]
    finally:
        state.close()
    assert gpus["available"] is True
    assert [gpu["memory_total_gb"] for gpu in gpus["devices"]] == [103.08, 103.08]
    assert gpus["devices"][0]["memory_used_bytes"] == 2 * GIB
    process = gpus["devices"][0]["processes"][0]
    assert process["pid"] == os.getpid()
    assert process["name"] == psutil.Process().name()
    assert process["used_gb"] == round(2 * GIB / GB, 2)
    assert gpus["devices"][1]["processes"] == []


def test_a_failing_gpu_probe_is_unavailable_with_the_reason_not_a_crash(tmp_path: Path) -> None:
    """An NVML failure leaves GPU facts "unavailable" with NVML's reason; the rest still reads."""
    facts, state = _facts_with_nvml(tmp_path, _Nvml(lost=True))
    try:
        body = status_body(facts.snapshot(), None)
    finally:
        state.close()
    assert body["gpus"]["available"] is False
    assert "GPU is lost" in body["gpus"]["reason"]
    assert any("GPU is lost" in problem for problem in body["problems"])
    assert body["ram"]["total_gb"] > 0
    assert body["config"]["effective"] == "ratio 2 x device pool"


@pytest.mark.slow
def test_the_pools_come_from_the_beginning_of_the_last_run(rig: Rig) -> None:
    """With the server stopped, the pools are read from the start of its last run, however many
    request lines it printed after its startup (a tail of the log would no longer hold them)."""
    rig.start()
    rig.control.stop(grace_s=5)
    log = rig.settings.log_file
    access = '[2026-01-01 00:00:00] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK\n'
    with log.open("a", encoding="utf-8") as handle:
        handle.write(access * 200_000)  # ~17 MB of request lines after the start
    text = rig.control.last_run_log(LOG_RUN_BYTES)
    assert report_of_text(text).device_tokens == DEVICE_TOKENS
    assert report_of_text(log.read_text()[-1_000_000:]).device_tokens is None


class _StartingUnit:
    """A stopped unit's last run as systemd gives it (one invocation ID for the whole run),
    whose journal text grows while the test runs (no systemd here: stood in for behind the
    facts service's control Protocol)."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.text = (
            "[2026-02-24 11:18:37 TP0] Init torch distributed begin.\n"
            "[2026-02-24 11:18:40 TP0] Load weight begin. avail mem=94.51 GB\n"
        )
        self.reads = 0

    def read_command(self) -> list[str]:
        return self.command

    def status(self) -> ServerProcessState:
        return ServerProcessState(ServerState.STOPPED)

    def cgroup(self) -> ServerCgroup:
        return ServerCgroup()

    def last_run_key(self) -> str | None:
        return "8c4b0d6e2f1a4b3c9d7e5f6a1b2c3d4e"

    def last_run_log(self, max_bytes: int) -> str:
        self.reads += 1
        return self.text[:max_bytes]


class _Down:
    """An SGLang server that does not answer."""

    def health(self) -> int | None:
        return None

    def server_info(self) -> dict[str, object] | None:
        return None


def test_a_run_read_while_starting_is_read_again_once_its_pools_are_logged(
    tmp_path: Path,
) -> None:
    """A parse of a run taken before its KV-pool line is not kept: once the line is logged
    (same run key) the pools come from the log, and that complete parse is then reused."""
    settings = agent_settings(tmp_path)
    unit = _StartingUnit(list(settings.command))
    state = AgentState(settings.state_dir)
    try:
        facts = FactsService(settings, make_probe(settings), unit, _Down(), state, SystemClock())
        assert status_body(facts.snapshot(), None)["capacity"]["source"] != "startup_log"
        unit.text += (
            "[2026-02-24 11:26:40 TP0] KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB\n"
            "[2026-02-24 11:26:51 TP0] Allocating 44.77 GB host memory for hierarchical KV "
            "cache.\n"
        )
        capacity = status_body(facts.snapshot(), None)["capacity"]
        assert capacity["source"] == "startup_log"
        assert capacity["device_tokens"] == 159_274
        assert capacity["host_gb_per_rank"] == 44.77
        reads = unit.reads
        assert status_body(facts.snapshot(), None)["capacity"]["device_tokens"] == 159_274
        assert unit.reads == reads  # complete: not read again
    finally:
        state.close()
