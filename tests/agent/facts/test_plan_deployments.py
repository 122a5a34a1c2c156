"""Plans through the real agent on simulated deployments: a draft model beside the target, a
hybrid model's pools, a DSA indexer's host pool.

The server is the simulator (``python -m bot.sim``) on its ``small-2gpu-draft``, ``-hybrid`` and
``-dsa`` profiles, run by the real process backend. The draft profile's log shows the target's
pool (35,136 B/token) and, after the CUDA graphs, a draft model's (576 B/token). Expected figures
are SGLang's rule written out here on the profiles' figures, never the planner's output.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.agent.config import AgentSettings
from bot.agent.control import ServerControl
from bot.agent.facts import FactsService
from bot.agent.service import make_control, make_probe
from bot.agent.sglang_client import SGLangClient
from bot.agent.state import AgentState
from bot.clock import SystemClock
from bot.planner import BytesSource, ChangeRequest
from bot.sim import model_dir
from tests.agent._api_helpers import agent_settings, free_port
from tests.agent.conftest import wait_until

PROFILE = "small-2gpu-draft"
DEVICE_TOKENS = 200_000  # the profile's pool at its default mem_fraction_static
TARGET_BYTES = 35_136  # (256 + 32) x 61 layers x 2 bytes (bf16), the target model's
DRAFT_BYTES = 576  # one MTP layer


def sglang_ratio_bytes(ratio: float) -> int:
    """SGLang's host pool for a ratio, on the target's pool: int(tokens x R) + one page."""
    return (int(DEVICE_TOKENS * ratio) + 1) * TARGET_BYTES


def settings_for(tmp_path: Path, model_path: str, profile: str = PROFILE) -> AgentSettings:
    port = free_port()
    command = [sys.executable, "-m", "bot.sim", "--model-path", model_path, "--tp", "2",
               "--port", str(port), "--speculative-algorithm", "EAGLE",
               "--enable-hierarchical-cache", "--hicache-ratio", "2"]  # fmt: skip
    return agent_settings(
        tmp_path, profile=profile, command=command, server_url=f"http://127.0.0.1:{port}"
    )


@dataclass
class Agent:
    """The agent's facts service and the control of the server it runs."""

    facts: FactsService
    control: ServerControl


@pytest.fixture
def agent_on(tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    """Starts the simulator with ``--model-path`` on a profile, and the agent's facts on it; the
    server is stopped afterwards."""
    opened: list[tuple[ServerControl, SGLangClient, AgentState]] = []

    def build(model_path: str, profile: str = PROFILE) -> Agent:
        settings = settings_for(tmp_path, model_path, profile)
        clock = SystemClock()
        control = make_control(settings, clock)
        sglang = SGLangClient(settings.server_url)
        state = AgentState(settings.state_dir)
        opened.append((control, sglang, state))
        control.start("test:1")
        wait_until(lambda: sglang.health() == 200, timeout_s=60)
        facts = FactsService(settings, make_probe(settings), control, sglang, state, clock)
        return Agent(facts, control)

    yield build
    for control, sglang, state in opened:
        control.stop(grace_s=5)
        sglang.close()
        state.close()


@pytest.mark.slow
def test_ratio_4_with_a_draft_model_plans_on_the_target_pool_from_the_config(
    agent_on: Callable[..., Agent],
) -> None:
    """With --model-path at the profile's config.json, ratio 4 is SGLang's figure to the byte on
    the target's pool; the plan names the draft pool it does not multiply and budgets on it."""
    facts = agent_on(str(model_dir(PROFILE))).facts
    plan, _ = facts.plan(ChangeRequest(ratio=4))
    assert plan.per_rank_bytes == sglang_ratio_bytes(4)
    assert plan.bytes_per_token == TARGET_BYTES
    assert plan.bytes_per_token_source is BytesSource.CONFIG
    assert plan.ratio_pool is not None
    assert "draft model's pool" in plan.ratio_pool
    # The budget counts the target's figure on both ranks (the 64 GB host cannot hold it).
    assert f"2 ranks x {sglang_ratio_bytes(4) / 1e9:.2f} GB" in plan.reason


@pytest.mark.slow
def test_ratio_4_with_a_draft_model_and_no_config_errs_toward_more_ram(
    agent_on: Callable[..., Agent],
) -> None:
    """With no readable config.json the target's logged pool gives at least SGLang's bytes,
    within the two-decimal rounding, and never the draft's 576 B/token."""
    facts = agent_on("/models/not-here").facts
    plan, _ = facts.plan(ChangeRequest(ratio=4))
    sglang = sglang_ratio_bytes(4)
    logged_gib = round((DEVICE_TOKENS + 1) * TARGET_BYTES / 1024**3, 2)
    assert plan.per_rank_bytes is not None
    assert sglang <= plan.per_rank_bytes <= sglang * (1 + 0.01 / (logged_gib - 0.005))
    assert plan.bytes_per_token_source is BytesSource.LOG_UPPER_BOUND
    assert plan.per_rank_bytes > 10 * (int(DEVICE_TOKENS * 4) + 1) * DRAFT_BYTES


@pytest.mark.slow
def test_a_size_on_a_dsa_host_scales_the_indexer_the_last_start_logged(
    agent_on: Callable[..., Agent],
) -> None:
    """The last start logged a KV host pool and a DSA indexer (132 x 61 B per host token beside
    35,136 B): size 8 plans the indexer in that proportion on both ranks, in the budget."""
    facts = agent_on("/models/x", "small-2gpu-dsa").facts
    plan, _ = facts.plan(ChangeRequest(size_gb=8))
    assert plan.per_rank_bytes is not None
    indexer = plan.host_extra_bytes_per_rank["DSA indexer"]
    # The logged sizes (two decimals) of ratio 2's pools: 400,001 host tokens each.
    kv_gb = round((2 * DEVICE_TOKENS + 1) * TARGET_BYTES / 1e9, 2)
    indexer_gb = round((2 * DEVICE_TOKENS + 1) * 132 * 61 / 1e9, 2)
    assert plan.per_rank_bytes * indexer_gb / kv_gb <= indexer
    assert indexer <= plan.per_rank_bytes * (indexer_gb + 0.005) / (kv_gb - 0.005) + 1
    assert plan.total_bytes == 2 * (plan.per_rank_bytes + indexer)
    assert "DSA indexer" in plan.reason


@pytest.mark.slow
def test_a_ratio_on_a_stopped_hybrid_server_multiplies_the_full_attention_pool(
    agent_on: Callable[..., Agent],
) -> None:
    """Stopped, the hybrid server's last log holds a 160,000-token sliding-window pool and the
    200,000-token full-attention pool that max_total_num_tokens names: ratio 2 multiplies that."""
    agent = agent_on("/models/x", "small-2gpu-hybrid")
    agent.control.stop(grace_s=5)
    facts = agent.facts
    plan, _ = facts.plan(ChangeRequest(ratio=2))
    assert plan.device_tokens == DEVICE_TOKENS
    assert plan.per_rank_tokens == 2 * DEVICE_TOKENS + 1
    assert plan.ratio_pool is not None
    assert "200,000 tokens" in plan.ratio_pool
