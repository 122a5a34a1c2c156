"""The operation engine's scenarios against the real simulator, on both control backends
(``process``, and ``systemd`` over the stand-in systemctl/journalctl, as systemd is not PID 1
here: see ``tests/agent/engine/_backends.py``), with SimProbe and real SQLite."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.agent.cmdline import read_hicache
from bot.errors import InputError, NotFound, OperationConflict, PlanRefused, StaleProposal
from tests.agent._ops_fixtures import phases, wait_final
from tests.agent.engine._backends import (
    SMALL,
    BackendRig,
    backend_rig,
    harness_factory,
    systemd_rig,
)

__all__ = ["backend_rig", "harness_factory", "systemd_rig"]

pytestmark = pytest.mark.slow

Rigs = Callable[..., BackendRig]

# small-2gpu at --mem-fraction-static 0.7: 150,000 device tokens of 35,136 B (the profile).
DEVICE_TOKENS = 150_000
BYTES_PER_TOKEN = 35_136


def host_pool(ratio: int) -> tuple[int, float]:
    """SGLANG_FACTS.md section 1: tokens = int(device x ratio), one extra page (page size 1)."""
    tokens = int(DEVICE_TOKENS * ratio) // 1 + 1
    return tokens, round(tokens * BYTES_PER_TOKEN / 1e9, 2)


def test_resize_ratio_2_to_4_reaches_ready_with_every_phase(backend_rig: Rigs) -> None:
    """A ratio 2 -> 4 resize writes the new command line, stops, waits, starts and follows every
    phase in order to ready, recording the host pool per rank as logged and the new config as
    served, with one start for the resize."""
    rig = backend_rig()
    old_pid = rig.start_server()
    manager = rig.manager()
    op = manager.submit("resize", actor="ana", ratio=4)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    expected = [
        "planned", "stopping", "waiting_gpus", "starting", "init", "load_weights", "kv_pool",
        "cuda_graph", "host_pool", "http", "warmup", "verifying", "ready",
    ]  # fmt: skip
    assert phases(events) == expected
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    progress = [e.progress for e in events]
    assert progress == sorted(progress)
    assert progress[-1] == 1.0
    tokens, gb = host_pool(4)
    ready = events[-1]
    assert ready.data["host_gb_per_rank"] == gb
    assert ready.data["device_tokens"] == DEVICE_TOKENS
    assert f"{gb:.2f} GB/rank" in ready.message
    assert ready.data["host_tokens_per_rank"] == tokens
    shards = [e.data["shard"] for e in events if "shard" in e.data]
    assert shards == sorted(shards)
    assert shards[-1] == 4  # the small profile's four shards
    info = rig.client().server_info()
    assert info is not None
    assert info["hicache_ratio"] == 4
    assert rig.control().status().main_pid != old_pid
    assert rig.starts() == 2  # the first server and the resize's
    assert read_hicache(rig.control().read_command()).ratio == 4
    previous = rig.control().previous_command()
    assert previous is not None
    assert read_hicache(previous).ratio == 2
    revision = manager.state.revision(final.revision or 0)
    assert revision is not None
    assert revision.became_ready
    assert revision.host_gb_per_rank == gb
    assert revision.startup_s is not None
    assert revision.startup_s > 0


def test_oversized_request_is_refused_before_anything_stops(backend_rig: Rigs) -> None:
    """2 x 300 GB on the simulated 60 GB host is refused with the Plan: the server keeps its pid
    and is not started again, the command line is not rewritten (nothing kept as the previous
    one), and no operation or revision is recorded."""
    rig = backend_rig()
    pid = rig.start_server()
    command = rig.control().read_command()
    manager = rig.manager()
    with pytest.raises(PlanRefused) as refused:
        manager.submit("resize", actor="ben", size_gb=300)
    plan = refused.value.plan
    assert plan is not None
    assert plan.total_gb == pytest.approx(2 * 300, rel=1e-3)  # type: ignore[attr-defined]
    assert rig.control().status().main_pid == pid
    assert rig.starts() == 1
    assert rig.control().read_command() == command
    assert rig.control().previous_command() is None
    assert manager.recent(10) == []
    assert manager.revisions() == []


def test_start_dying_of_host_memory_rolls_back(backend_rig: Rigs) -> None:
    """A size the planner allows (no headroom) but SGLang 0.5.23 refuses at start dies with the
    host-memory ValueError, and the agent writes the ready config back and starts it:
    rolled_back, cause host_memory, with the decisive line; the refused line is kept as the
    previous command."""
    rig = backend_rig(env={"KIMI_SIM_VERSION": "0.5.23"})
    rig.start_server()
    manager = rig.manager()
    # small-2gpu: 60 GB available; 2 ranks x 24 GB fit the planner's budget without headroom,
    # but SGLang 0.5.23 splits (available - 10 GiB) over the ranks after the new server's own
    # RAM is taken: less than 24 GB per rank.
    op = manager.submit("resize", actor="ana", size_gb=24)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "rolled_back", events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == "host_memory"
    assert any("Not enough host memory available" in line for line in final.failure["lines"])
    assert "rolling_back" in phases(events)
    assert events[-1].data["cause"]["kind"] == "host_memory"
    assert rig.starts() == 3  # the first server, the refused size, the rollback
    assert read_hicache(rig.control().read_command()).ratio == 2
    previous = rig.control().previous_command()
    assert previous is not None
    assert read_hicache(previous).size_gb == 24
    info = rig.client().server_info()
    assert info is not None
    assert info["hicache_ratio"] == 2
    assert not info["hicache_size"]


def test_stale_fingerprint_and_concurrent_operation_are_rejected(backend_rig: Rigs) -> None:
    """A proposal's fingerprint from other facts raises StaleProposal; a second operation while
    one runs raises OperationConflict naming who holds it and since when."""
    rig = backend_rig()
    rig.start_server()
    manager = rig.manager()
    with pytest.raises(StaleProposal):
        manager.submit("resize", actor="ana", ratio=3, fingerprint="0000000000000000")
    assert manager.recent(10) == []
    assert manager.revisions() == []
    op = manager.submit("restart", actor="ana")
    with pytest.raises(OperationConflict) as conflict:
        manager.submit("resize", actor="ben", ratio=3)
    assert conflict.value.holder == "ana"
    assert conflict.value.since == op.created_at
    assert wait_final(manager, op.id).state == "ready"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"kind": "explode"}, "kind"),
        ({"kind": "resize"}, "ratio"),
        ({"kind": "resize", "ratio": float("nan")}, "finite"),
        ({"kind": "restart", "ratio": 2.0}, "no ratio"),
        ({"kind": "resize", "ratio": 2.0, "actor": ""}, "actor"),
    ],
)
def test_bad_requests_change_nothing(
    backend_rig: Rigs, kwargs: dict[str, object], fragment: str
) -> None:
    """Bad kinds and arguments raise InputError naming the fault, record nothing and leave the
    command line as it was."""
    rig = backend_rig()
    command = rig.control().read_command()
    manager = rig.manager()
    args = {"actor": "ana", **kwargs}
    with pytest.raises(InputError, match=fragment):
        manager.submit(**args)  # type: ignore[arg-type]
    assert manager.recent(10) == []
    assert manager.revisions() == []
    assert rig.control().read_command() == command
    assert rig.control().previous_command() is None


def test_unknown_revision_and_operation_are_not_found(backend_rig: Rigs) -> None:
    """Rolling back to a revision that does not exist, or reading an unknown operation, raises
    NotFound."""
    rig = backend_rig()
    rig.start_server()
    manager = rig.manager()
    with pytest.raises(NotFound):
        manager.submit("rollback", actor="ana", revision=999)
    with pytest.raises(NotFound):
        manager.get(12345)
    assert manager.recent(10) == []


def test_rollback_returns_to_the_last_ready_config(backend_rig: Rigs) -> None:
    """After a resize to ratio 3, a rollback with no revision named returns to the config that
    was ready before it (ratio 2), recorded as a rollback revision of the resized one."""
    rig = backend_rig()
    rig.start_server()
    manager = rig.manager()
    resized = wait_final(manager, manager.submit("resize", actor="ana", ratio=3).id)
    assert resized.state == "ready"
    back = manager.submit("rollback", actor="ben")
    final = wait_final(manager, back.id)
    assert final.state == "ready", manager.state.events(back.id)[-1].message
    assert final.rollback_of == resized.revision
    info = rig.client().server_info()
    assert info is not None
    assert info["hicache_ratio"] == 2
    # The ETA comes from this host's earlier start, scaled to the new pool: a fixed cost plus
    # 60 s of pinning per 110 GB per rank (the upstream rate, one sample here).
    first = manager.state.revision(resized.revision or 0)
    assert first is not None
    assert first.startup_s is not None
    assert first.host_gb_per_rank is not None
    rate = 60 / 110
    assert back.plan is not None
    planned_gb = back.plan["per_rank_bytes"] / 1e9
    expected = max(0.0, first.startup_s - rate * first.host_gb_per_rank) + rate * planned_gb
    starting = next(e for e in manager.state.events(back.id) if e.phase == "starting")
    assert starting.data["eta_s"] + starting.data["elapsed_s"] == pytest.approx(expected, abs=0.15)
    newest = manager.revisions()[0]
    assert (newest.kind, newest.rollback_of) == ("rollback", resized.revision)
    assert newest.became_ready


@pytest.mark.parametrize(("failure", "kind"), [("crash_loading", "crash"),
                                               ("gpu_oom_graph", "gpu_memory")])  # fmt: skip
def test_a_failed_rollback_stops_and_says_so(backend_rig: Rigs, failure: str, kind: str) -> None:
    """When every start fails (KIMI_SIM_FAIL set after the first server came up), the operation
    rolls back once, the rollback fails too, and it ends failed saying so: no second rollback,
    three starts in all."""
    rig = backend_rig()
    rig.start_server()
    rig.set_server_env({"KIMI_SIM_FAIL": failure})
    manager = rig.manager()
    op = manager.submit("resize", actor="ana", ratio=3)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert phases(events).count("rolling_back") == 1
    assert "rollback failed too" in events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == kind
    assert final.failure["lines"]
    assert rig.starts() == 3  # the first server, the resize's, the rollback's


def test_a_failed_restart_stops_and_does_not_start_an_earlier_config(backend_rig: Rigs) -> None:
    """A restart whose (current) config dies at start ends failed with the cause and the server
    stopped, even with an earlier, different config on record as ready: that one is started
    only when a rollback is asked for."""
    rig = backend_rig(*SMALL, "--hicache-size", "24", env={"KIMI_SIM_VERSION": "0.5.23"})
    manager = rig.manager()
    current = rig.control().read_command()
    earlier = [*current[: current.index("--hicache-size")], "--hicache-ratio", "2"]
    manager.state.add_revision(
        argv=earlier, hicache={"enabled": True, "ratio": 2.0}, created_at="2026-01-01T00:00:00",
        actor="ana", kind="resize", outcome="ready", became_ready=True,
    )  # fmt: skip
    op = manager.submit("restart", actor="ana")
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == "host_memory"
    assert "rolling_back" not in phases(events)
    message = events[-1].message
    assert "the restarted config (the current one) failed to start" in message
    assert "the server is stopped" in message
    assert "rollback" in message
    assert not rig.control().status().running
    assert rig.starts() == 1  # no second start


def test_a_restart_keeps_the_previous_config_on_record(backend_rig: Rigs) -> None:
    """Resize ratio 2 -> 3, then restart: the kept previous command is still the ratio-2 one,
    not the unchanged ratio-3 line written again."""
    rig = backend_rig()
    rig.start_server()
    manager = rig.manager()
    assert wait_final(manager, manager.submit("resize", actor="ana", ratio=3).id).state == "ready"
    assert wait_final(manager, manager.submit("restart", actor="ana").id).state == "ready"
    previous = rig.control().previous_command()
    assert previous is not None
    assert read_hicache(previous).ratio == 2
