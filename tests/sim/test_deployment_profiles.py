"""Profiles of deployments as they are run: a draft model, a hybrid model and a DSA indexer, and
the model files shipped with each profile. The startup parser reads each simulated start back."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from bot.errors import SimError
from bot.planner import kv_shape_from_config
from bot.sim import load_profile, model_dir
from bot.startup import PoolKind, read_startup_report
from tests.sim.conftest import Sim

READY = "The server is fired up and ready to roll!"
ARGS = ["--model-path", "/models/x", "--tp", "2", "--host", "127.0.0.1", "--port", "0"]
HICACHE = ["--enable-hierarchical-cache", "--hicache-ratio", "2"]
GiB = 1024**3
# Every small-2gpu variant runs 200,000 device tokens at its default mem_fraction_static.
TOKENS = 200000


def logged_gib(tokens: int, per_token: int) -> float:
    """SGLang's device buffer holds one padding page beside the tokens; logged to 0.01 GiB."""
    return round((tokens + 1) * per_token / GiB, 2)


@pytest.mark.parametrize(
    "name",
    ["kimi-k25-8gpu", "small-2gpu", "small-2gpu-draft", "small-2gpu-hybrid", "small-2gpu-dsa"],
)
def test_each_profile_ships_a_model_config_matching_its_bytes_per_token(name: str) -> None:
    """The shipped config.json gives the profile's KV bytes per token, and the safetensors
    index names a total size but no weights are shipped."""
    profile = load_profile(name)
    folder = model_dir(name)
    config = json.loads((folder / "config.json").read_text())
    shape = kv_shape_from_config(config, tp_size=profile.gpu_count)
    assert shape.bytes_per_token == profile.kv_bytes_per_token
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] > 0
    assert not list(folder.glob("*.safetensors"))


def test_a_profile_without_model_files_says_so() -> None:
    """Asking for the model files of an unknown profile is a SimError naming it."""
    with pytest.raises(SimError, match="no-such-host"):
        model_dir("no-such-host")


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_draft_profile_logs_a_draft_pool_after_graphs(
    run_sim: Callable[..., Sim], sim_env: dict[str, str], version: str
) -> None:
    """The draft model's 576 B/token pool comes after the target's graphs; the report keeps the
    target's 35,136 B/token pool as the device pool and the draft beside it."""
    env = dict(sim_env, KIMI_SIM_PROFILE="small-2gpu-draft", KIMI_SIM_VERSION=version)
    sim = run_sim([*ARGS, *HICACHE], env, merged=True)
    sim.wait_for(READY)
    report = read_startup_report(sim.out_path)
    assert set(report.kv_gib_per_rank.values()) == {logged_gib(TOKENS, 35136)}
    assert report.draft_pool is not None
    assert report.draft_pool.kv_gib == logged_gib(TOKENS, 576)
    assert [p.kind for p in report.pools] == [PoolKind.TARGET, PoolKind.DRAFT]
    assert report.ready


@pytest.mark.slow
def test_hybrid_profile_logs_a_sliding_window_pool_before_the_target(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """A 160,000-token pool (0.8 x 200,000) before the 200,000-token full-attention pool, both
    MHA (K and V apart): the device pool is the one max_total_num_tokens names."""
    env = dict(sim_env, KIMI_SIM_PROFILE="small-2gpu-hybrid", KIMI_SIM_VERSION="0.5.23")
    sim = run_sim([*ARGS, *HICACHE], env, merged=True)
    sim.wait_for(READY)
    assert "K size: " in sim.stdout()
    report = read_startup_report(sim.out_path)
    per_token = 2 * 4 * 64 * 24 * 2
    assert [(p.kind, p.tokens) for p in report.pools] == [
        (PoolKind.OTHER, 160000),
        (PoolKind.TARGET, TOKENS),
    ]
    assert set(report.device_tokens_per_rank.values()) == {TOKENS}
    half = round((TOKENS + 1) * per_token / 2 / GiB, 2)
    assert set(report.kv_gib_per_rank.values()) == {round(2 * half, 2)}


@pytest.mark.slow
def test_dsa_profile_logs_an_indexer_host_pool_counted_as_ram(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """Ratio 2 on 200,000 tokens: 400,001 host tokens, a KV host pool of 35,136 B and an
    indexer of 132 x 61 B per token on each rank, both in the host total."""
    env = dict(sim_env, KIMI_SIM_PROFILE="small-2gpu-dsa", KIMI_SIM_VERSION="0.5.23")
    sim = run_sim([*ARGS, *HICACHE], env, merged=True)
    sim.wait_for(READY)
    report = read_startup_report(sim.out_path)
    host_tokens = 2 * TOKENS + 1
    kv_gb = round(host_tokens * 35136 / 1e9, 2)
    indexer_gb = round(host_tokens * 132 * 61 / 1e9, 2)
    assert report.host_gb_per_rank == {"TP0": kv_gb, "TP1": kv_gb}
    assert report.host_extra_gb_per_rank == {r: {"DSA indexer": indexer_gb} for r in ("TP0", "TP1")}
    assert report.host_gb_total == round(2 * (kv_gb + indexer_gb), 2)
