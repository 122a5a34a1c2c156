"""The agent's reading of the host-pool flags for the planner (``host_pool_flags``): Mooncake's
segment from the extra config, a JSON file or the server's environment, and the ranks it is
divided by."""

from __future__ import annotations

from pathlib import Path

import httpx

from bot.agent.cmdline import HostPoolArgs, Topology
from bot.agent.facts._planning import host_pool_flags
from bot.agent.http.app import create_app
from bot.agent.service import build_service
from bot.planner import (
    GB,
    ChangeRequest,
    DevicePool,
    HostMemory,
    ServerFacts,
    Verdict,
    make_plan,
)
from bot.vocab import RefusedBy
from tests.agent._api_helpers import agent_settings, auth, serve_in_thread, tree_listing

GiB = 1024**3


def _no_file(path: str) -> str:
    raise OSError(f"no file {path} in this test")


def test_the_segment_comes_from_an_at_file_and_is_divided_by_attention_tp_times_pp() -> None:
    """@file JSON names the master and 24gb; TP 8 with DP attention over 2 is attention TP 4,
    x PP 2: the segment is divided by 8."""
    args = HostPoolArgs(storage_backend="mooncake", storage_extra_config="@/etc/sglang/mc.json")
    files = {
        "/etc/sglang/mc.json": '{"master_server_address": "m:1", "global_segment_size": "24gb"}'
    }
    topology = Topology(tp=8, dp=2, pp=2, dp_attention=True)
    flags = host_pool_flags(args, topology, None, read_file=files.__getitem__)
    assert flags.mooncake is not None
    assert flags.mooncake.global_bytes == 24 * GiB
    assert flags.storage_ranks == 8


def test_a_mooncake_configured_only_in_an_unseen_environment_is_refused_saying_how() -> None:
    """No address in the extra config and no known server environment: the segment is
    unknown, and the plan is refused naming the fix, not planned without the segment."""
    args = HostPoolArgs(storage_backend="mooncake")
    flags = host_pool_flags(args, Topology(tp=2), None, read_file=_no_file)
    server = ServerFacts(
        ranks=2, device_pool=DevicePool(tokens=159274, bytes_per_token=70272), host_pool_flags=flags
    )
    plan = make_plan(ChangeRequest(size_gb=30), server, HostMemory(available_bytes=2000 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert plan.refused_by is RefusedBy.MISSING_FACTS
    assert "--hicache-storage-backend-extra-config" in plan.reason
    assert plan.host_pools == ()


def test_the_servers_environment_and_its_config_file_give_the_segment() -> None:
    """Given the server's environment, SGLANG_HICACHE_MOONCAKE_CONFIG_PATH's file is read."""
    args = HostPoolArgs(storage_backend="mooncake")
    environ = {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": "/etc/mc.json"}
    files = {"/etc/mc.json": '{"client_server_address": "c:1", "global_segment_size": 1000}'}
    flags = host_pool_flags(args, Topology(), environ, read_file=files.__getitem__)
    assert flags.mooncake is not None
    assert flags.mooncake.global_bytes == 1000
    assert flags.mooncake.source == "/etc/mc.json"


def test_an_unreadable_extra_config_is_a_problem_not_a_missing_pool() -> None:
    """A bad extra config makes the segment unknown with the reason, so the plan refuses."""
    args = HostPoolArgs(storage_backend="mooncake", storage_extra_config="{oops")
    flags = host_pool_flags(args, Topology(), {}, read_file=_no_file)
    assert flags.mooncake is not None
    assert flags.mooncake.global_bytes is None
    assert flags.mooncake.problem is not None
    assert "not JSON" in flags.mooncake.problem


def test_a_resize_on_an_unknown_storage_backend_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """Through the agent's API, a resize of a server on ``--hicache-storage-backend hf3fs`` is
    refused (422) naming the backend; the state directory is byte-for-byte the same and no
    operation or server was started."""
    hicache = ("--enable-hierarchical-cache", "--hicache-ratio", "2")
    settings = agent_settings(tmp_path, hicache=(*hicache, "--hicache-storage-backend", "hf3fs"))
    service = build_service(settings)
    try:
        with (
            serve_in_thread(create_app(service)) as url,
            httpx.Client(base_url=url, timeout=30) as http,
        ):
            http.get("/v1/status", headers=auth())  # the first read stores the command
            state = settings.state_dir
            before = {k: v for k, v in tree_listing(state).items() if not k.endswith("-shm")}
            body = {"kind": "resize", "size_gb": 30, "actor": "ana"}
            response = http.post("/v1/operations", json=body, headers=auth())
            assert response.status_code == 422, response.text
            assert "'hf3fs'" in response.text
            after = {k: v for k, v in tree_listing(state).items() if not k.endswith("-shm")}
            assert after == before
            assert http.get("/v1/operations", headers=auth()).json() == {"operations": []}
            assert service.manager.control.status().main_pid is None
    finally:
        service.manager.close()
        service.manager.control.stop(grace_s=5)
        service.close()
