"""Whole operations through the agent on simulated deployments (process backend, SimProbe, real
SQLite): a speculative-decoding server and a server with a DSA indexer's host pool, resized to
ready. Expected figures are SGLang's rule written out here on the profiles' figures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

# small-2gpu variants at --mem-fraction-static 0.7: 150,000 device tokens of 35,136 B.
DEVICE_TOKENS = 150_000
TARGET_BYTES = 35_136
SMALL = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache")


def host_tokens(ratio: int) -> int:
    """SGLang's host pool tokens for a ratio: int(device x ratio), one extra page (page 1)."""
    return int(DEVICE_TOKENS * ratio) + 1


def test_resize_with_a_draft_model_plans_and_reports_the_target_pool(
    harness_factory: Callable[..., Harness],
) -> None:
    """Ratio 2 -> 3 with a draft model: the plan multiplies the target's pool, the follower
    reports the draft's pool beside it, and ready states the target's figures."""
    harness = harness_factory(
        sim_command(free_port(), *SMALL, "--hicache-ratio", "2"), profile="small-2gpu-draft"
    )
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=3)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    plan = manager.get(op.id).plan
    assert plan is not None
    assert plan["device_tokens"] == DEVICE_TOKENS
    assert plan["per_rank_tokens"] == host_tokens(3)
    assert plan["per_rank_bytes"] >= host_tokens(3) * TARGET_BYTES
    draft = [e for e in events if "draft_kv_gib" in e.data and e.phase == "kv_pool"]
    assert draft[0].data["draft_kv_gib"] == round((DEVICE_TOKENS + 1) * 576 / 1024**3, 2)
    ready = events[-1]
    assert ready.data["kv_gib_per_rank"] == round((DEVICE_TOKENS + 1) * TARGET_BYTES / 1024**3, 2)
    assert ready.data["host_tokens_per_rank"] == host_tokens(3)


def test_resize_with_a_dsa_indexer_counts_it_in_the_plan_and_the_ready_message(
    harness_factory: Callable[..., Harness],
) -> None:
    """Ratio 2 -> 3 on a DSA host: the plan scales the indexer the ratio-2 start logged, and the
    ready message gives the KV host pool, the indexer and the total on both ranks."""
    harness = harness_factory(
        sim_command(free_port(), *SMALL, "--hicache-ratio", "2"),
        profile="small-2gpu-dsa",
        version="0.5.23",
    )
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=3)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    plan = manager.get(op.id).plan
    assert plan is not None
    assert "DSA indexer" in plan["host_extra_gb_per_rank"]
    kv_gb = round(host_tokens(3) * TARGET_BYTES / 1e9, 2)
    indexer_gb = round(host_tokens(3) * 132 * 61 / 1e9, 2)
    # Scaled by the ratio-2 start's logged sizes, each rounded to 0.01 GB: at least the true
    # figure, at most the top of that rounding.
    kv_logged = round(host_tokens(2) * TARGET_BYTES / 1e9, 2)
    indexer_logged = round(host_tokens(2) * 132 * 61 / 1e9, 2)
    ceiling = plan["per_rank_gb"] * (indexer_logged + 0.005) / (kv_logged - 0.005)
    assert indexer_gb - 0.005 <= plan["host_extra_gb_per_rank"]["DSA indexer"] <= ceiling + 0.001
    ready = events[-1]
    assert ready.data["host_extra_gb_per_rank"] == {"DSA indexer": indexer_gb}
    assert ready.data["host_total_gb_per_rank"] == round(kv_gb + indexer_gb, 2)
    assert f"+ {indexer_gb:.2f} GB/rank DSA indexer" in ready.message
    assert f"= {2 * (kv_gb + indexer_gb):.1f} GB" in ready.message
