"""A first start by ratio, planned on the device pool estimated from the model's files: the real
agent (operation manager, process backend, SQLite) and the real simulator on the field notes'
host (Kimi-K2.5, 8 x 96 GiB, TP 8, 449 GB RAM). NVML cannot run here: the GPUs' memory comes from
the simulator's host profile through the ``sim`` probe, behind the same ``HostProbe`` Protocol.

Expected figures are SGLang's rules written out here on the model's files and the profile.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import pytest

from bot.errors import PlanRefused
from bot.planner import ChangeRequest
from bot.sim import model_dir
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, wait_final

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

PROFILE = "kimi-k25-8gpu"
GIB = 1024**3
KIMI_BYTES = (512 + 64) * 2 * 61  # MLA, bf16, 61 layers: 70,272 B
KIMI_WEIGHTS = 621_309_969_039  # the checkpoint's total_size: 8 x 72.33 GiB
# SGLang's default fraction at its least reserve on a 96 GiB GPU: the 10 GiB floor.
FRACTION = round((96 * 1024 - 10 * 1024) / (96 * 1024), 3)
# What the field notes' host logged at SGLang's default (0.88 on that deployment).
LOGGED_TOKENS = 159_274


def command(model_path: str) -> list[str]:
    return [sys.executable, "-m", "bot.sim", "--model-path", model_path, "--tp", "8",
            "--port", str(free_port()), "--enable-hierarchical-cache",
            "--hicache-ratio", "2"]  # fmt: skip


def estimated_tokens() -> int:
    """profile_max_num_token on 96 GiB: (memory x fraction - weights per rank) // bytes."""
    return (math.floor(96 * GIB * FRACTION) - KIMI_WEIGHTS // 8) // KIMI_BYTES


def test_a_first_start_by_ratio_is_planned_on_the_estimate_then_the_log_replaces_it(
    harness_factory: Callable[..., Harness],
) -> None:
    """Never started, ratio 2: the restart is planned on the estimate (an upper bound of the
    pool the start then logs), reaches ready, and the next plan uses the logged pool."""
    harness = harness_factory(command(str(model_dir(PROFILE))), profile=PROFILE)
    manager = harness.manager()
    op = manager.submit("restart", actor="ana")
    assert op.plan is not None
    planned_tokens = estimated_tokens()  # the bound itself, no margin
    assert op.plan["device_pool_source"] == "estimate"
    assert op.plan["device_pool_estimate"]["tokens"] == estimated_tokens()
    assert op.plan["device_tokens"] == planned_tokens
    assert op.plan["per_rank_tokens"] == int(planned_tokens * 2) + 1
    assert any("startup guard stops the start" in note for note in op.plan["notes"])

    final = wait_final(manager, op.id)
    ready = manager.state.events(op.id)[-1]
    assert final.state == "ready", ready.message
    # Planned vs logged: the estimate is above the pool SGLang sized, so was the host pool.
    logged = ready.data["device_tokens"]
    assert logged == LOGGED_TOKENS
    assert op.plan["device_pool_estimate"]["tokens"] >= logged
    assert op.plan["per_rank_tokens"] >= ready.data["host_tokens_per_rank"] == 2 * logged + 1

    plan, _ = manager.planner(ChangeRequest(ratio=2))
    assert plan.device_pool_source == "server_info"
    assert plan.device_pool_estimate is None
    assert plan.device_tokens == LOGGED_TOKENS
    harness.parts()[0].stop(5)
    plan, _ = manager.planner(ChangeRequest(ratio=2))
    assert plan.device_pool_source == "startup_log"
    assert plan.device_tokens == LOGGED_TOKENS


def test_a_hub_name_keeps_the_refusal_names_it_and_changes_nothing(
    harness_factory: Callable[..., Harness],
) -> None:
    """With --model-path a hub id, a first restart by ratio is refused before anything starts,
    saying the path is not a directory here; no revision is recorded, no server runs."""
    harness = harness_factory(command("moonshotai/Kimi-K2.5"), profile=PROFILE)
    manager = harness.manager()
    with pytest.raises(PlanRefused) as refused:
        manager.submit("restart", actor="ana")
    reason = str(refused.value)
    assert "device pool's size, which is unknown" in reason
    assert "'moonshotai/Kimi-K2.5' is not a directory here" in reason
    assert "ask for a size in GB instead" in reason
    assert manager.state.revisions() == []
    assert manager.recent() == []
    assert not harness.parts()[0].status().running
