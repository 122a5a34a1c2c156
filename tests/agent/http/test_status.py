"""Tests for the ``/v1/status`` body's memory domain: the server's cgroup, its limit, the level
that sets it, and the headroom, read through the real facts service and probe on a fake v1 tree."""

from __future__ import annotations

from pathlib import Path

from bot.agent.facts.snapshot import FactsService
from bot.agent.host.nvml import NvmlUnavailable
from bot.agent.host.system import SystemProbe
from bot.agent.http.status import status_body
from bot.agent.service import make_control
from bot.agent.sglang_client import SGLangClient
from bot.agent.state.agent_state import AgentState
from bot.clock import SystemClock
from bot.planner import GB, ChangeRequest
from tests.agent._api_helpers import SMALL, agent_settings
from tests.agent.host._cgroup_trees import GIB, V1_FILES, v1_tree


class _NoNvml:
    """NVML without a driver, as on this machine."""

    def init(self) -> None:
        raise NvmlUnavailable("no NVIDIA driver here")

    def device_count(self) -> int:
        raise AssertionError("not initialised")

    def device_name(self, index: int) -> str:
        raise AssertionError("not initialised")

    def memory(self, index: int) -> tuple[int, int]:
        raise AssertionError("not initialised")

    def compute_processes(self, index: int) -> list[tuple[int, int]]:
        raise AssertionError("not initialised")


def test_a_stopped_process_backend_server_shows_the_agents_cgroup(tmp_path: Path) -> None:
    """The server is stopped and the process backend would spawn it in the agent's own cgroup,
    /process_api/abc, limited to 14 GiB with 2e9 in use besides file pages: status shows that
    cgroup, its limit and level, and a headroom of 13032385536 under the host's 25 GB; a plan
    that the cgroup refuses names it."""
    tree = v1_tree(tmp_path / "host", "/process_api/abc", V1_FILES)
    settings = agent_settings(tmp_path, profile=SMALL, probe="host")
    clock = SystemClock()
    state = AgentState(settings.state_dir)
    probe = SystemProbe(nvml=_NoNvml(), proc_root=tree.proc, meminfo=lambda: (30 * GB, 25 * GB))
    sglang = SGLangClient(settings.server_url)
    facts = FactsService(settings, probe, make_control(settings, clock), sglang, state, clock)
    try:
        ram = status_body(facts.snapshot(), None)["ram"]
        plan, _ = facts.plan(ChangeRequest(size_gb=1))
    finally:
        state.close()
        sglang.close()
    assert ram["cgroup"] == "/process_api/abc"
    assert ram["cgroup_limit_bytes"] == 14 * GIB
    assert ram["cgroup_limit_gb"] == 15.03
    assert ram["cgroup_limit_from"] == "/process_api/abc (memory.limit_in_bytes)"
    assert ram["cgroup_headroom_bytes"] == 13_032_385_536
    assert ram["headroom_bytes"] == 13_032_385_536
    assert ram["headroom_gb"] == 13.03
    assert ram["available_gb"] == 25.0
    assert plan.reason.startswith("the server's cgroup /process_api/abc allows 13.0 GB: ")
