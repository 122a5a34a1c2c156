"""Tests for the device pool estimate: SGLang's sizing rule written out here on the field notes'
host (Kimi-K2.5, 8 x 96 GiB, TP 8, 449 GB RAM), never the planner's own output."""

from __future__ import annotations

import json
import math

import pytest

from bot.errors import PlanInputError
from bot.planner import (
    ChangeRequest,
    DeviceMemory,
    DevicePool,
    DevicePoolSource,
    HostMemory,
    KvShape,
    ServerFacts,
    Verdict,
    default_mem_fraction_static,
    estimate_device_pool,
    kv_shape_from_config,
    make_plan,
)
from bot.sim import load_profile, model_dir, profile_names

GB = 1e9
GIB = 1024**3
# Kimi-K2.5's MLA shape in bf16: (512 + 64) x 2 bytes per layer, 61 layers = 70,272 B.
KIMI_SHAPE = KvShape("MLA", 576 * 2, 61, draft_layers=1)
KIMI_BYTES = 70_272
# The checkpoint's total_size: 8 ranks x the 72.33 GiB each rank's log says the weights took.
KIMI_WEIGHTS = 621_309_969_039
GPU = 96 * GIB


def sglang_default_fraction(gpu_mib: float, tp: int) -> float:
    """SGLang 0.5.x's automatic --mem-fraction-static with the least reserve it ever takes: 512
    MiB, 2,048 tokens of activations at 1.5 MiB, a GiB per 8 ranks; 10 GiB at least on a GPU
    over 60 GiB."""
    reserve = 512 + 2048 * 1.5 + tp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024)
    return round((gpu_mib - reserve) / gpu_mib, 3)


def sglang_tokens(gpu_bytes: int, fraction: float, weights_per_rank: int, per_token: int) -> int:
    """profile_max_num_token: (memory x fraction - weights) // bytes per token (page size 1)."""
    return (math.floor(gpu_bytes * fraction) - weights_per_rank) // per_token


def kimi(
    fraction: float | None = None,
    pool: DevicePool | None = None,
    source: DevicePoolSource | None = None,
) -> ServerFacts:
    """The field notes' server, with the GPU and weights an estimate needs."""
    memory = DeviceMemory(
        gpu_memory_bytes=GPU,
        weights_bytes_per_rank=KIMI_WEIGHTS // 8,
        mem_fraction_static=fraction or default_mem_fraction_static(GPU, tp=8),
        fraction_given=fraction is not None,
    )
    return ServerFacts(
        ranks=8,
        device_pool=pool or DevicePool(),
        kv_shape=KIMI_SHAPE,
        device_pool_source=source,
        device_memory=memory,
    )


def test_default_fraction_is_sglangs_rule_at_its_least_reserve() -> None:
    """96 GiB at TP 8 hits the 10 GiB floor (0.896); 24 GiB at TP 2 reserves 3,840 MiB."""
    assert default_mem_fraction_static(GPU, tp=8) == sglang_default_fraction(96 * 1024, 8)
    assert default_mem_fraction_static(GPU, tp=8) == 0.896
    assert default_mem_fraction_static(24 * GIB, tp=2) == sglang_default_fraction(24 * 1024, 2)
    assert default_mem_fraction_static(24 * GIB, tp=2) == 0.844


def test_a_ratio_with_no_start_on_record_is_planned_on_the_bound() -> None:
    """Ratio 2 on the field notes' host, never started: the pool is what the GPU holds at the
    fraction by SGLang's rule on the model's files, no margin on top, and the plan says
    "estimate" and shows the arithmetic."""
    plan = make_plan(ChangeRequest(ratio=2), kimi(), HostMemory(445 * GB))
    tokens = sglang_tokens(GPU, 0.896, KIMI_WEIGHTS // 8, KIMI_BYTES)
    planned = tokens
    assert plan.device_pool_source is DevicePoolSource.ESTIMATE
    assert plan.device_pool_estimate is not None
    assert plan.device_pool_estimate.tokens == tokens
    assert plan.device_tokens == planned
    assert plan.per_rank_bytes == (int(planned * 2) + 1) * KIMI_BYTES
    assert plan.verdict is Verdict.FITS
    note = next(n for n in plan.notes if n.startswith("device pool estimated"))
    assert f"{tokens:,} tokens" in note
    assert "margin" not in note
    assert "an upper bound of the pool SGLang sizes" in note
    assert "startup guard stops the start" in note
    assert plan.to_dict()["device_pool_source"] == "estimate"


def test_the_estimate_is_an_upper_bound_of_the_field_notes_pools() -> None:
    """At the fractions the field notes' host ran (0.88: 159,274 tokens; 0.93: 231,120), the
    estimate is at least what SGLang logged."""
    for fraction, logged in ((0.88, 159_274), (0.93, 231_120)):
        plan = make_plan(ChangeRequest(ratio=2), kimi(fraction), HostMemory(445 * GB))
        assert plan.device_pool_estimate is not None
        assert plan.device_pool_estimate.tokens >= logged
        assert plan.device_pool_estimate.memory.fraction_given


def test_the_bound_decides_the_verdict_to_the_byte() -> None:
    """A budget one byte short of the bound's host pools is refused; exactly that budget fits."""
    tokens = sglang_tokens(GPU, 0.896, KIMI_WEIGHTS // 8, KIMI_BYTES)
    needed = 8 * (int(tokens * 2) + 1) * KIMI_BYTES
    reserve = 10 * GIB
    for available, verdict in (
        (reserve + needed - 1, Verdict.REFUSED),
        (reserve + needed, Verdict.FITS),
    ):
        plan = make_plan(ChangeRequest(ratio=2), kimi(), HostMemory(available), headroom_gb=0)
        assert plan.verdict is verdict
        assert plan.total_bytes == needed


def test_a_logged_pool_wins_over_the_estimate() -> None:
    """Once a start logged the pool, the GPU and the weights are not used."""
    plan = make_plan(
        ChangeRequest(ratio=2),
        kimi(pool=DevicePool.from_log(159_274, 10.42), source=DevicePoolSource.STARTUP_LOG),
        HostMemory(445 * GB),
    )
    assert plan.device_pool_source is DevicePoolSource.STARTUP_LOG
    assert plan.device_pool_estimate is None
    assert plan.device_tokens == 159_274


def test_weights_that_leave_no_pool_are_refused_with_the_figures() -> None:
    """Weights of 90 GiB per rank in 96 GiB x 0.896 leave no pool: refused, saying so."""
    memory = DeviceMemory(GPU, 90 * GIB, 0.896, fraction_given=False)
    server = ServerFacts(ranks=8, kv_shape=KIMI_SHAPE, device_memory=memory)
    plan = make_plan(ChangeRequest(ratio=2), server, HostMemory(445 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert "90.00 GiB per rank" in plan.reason
    assert "size in GB" in plan.reason
    assert plan.device_pool_source is None


def test_what_is_missing_for_an_estimate_is_named_in_the_refusal() -> None:
    """With no model files to estimate from, the refusal keeps its advice and names the cause."""
    why = "--model-path 'moonshotai/Kimi-K2.5' is not a directory here (a hub name?)"
    plan = make_plan(
        ChangeRequest(ratio=2), ServerFacts(ranks=8, device_pool_missing=why), HostMemory(445 * GB)
    )
    assert plan.verdict is Verdict.REFUSED
    assert why in plan.reason
    assert "ask for a size in GB instead" in plan.reason


def test_a_size_needs_no_estimate() -> None:
    """A size is planned from the bytes per token alone: 48 GB/rank as SGLang sizes it."""
    plan = make_plan(ChangeRequest(size_gb=48), kimi(), HostMemory(445 * GB))
    assert plan.per_rank_bytes == (int(48 * GB // KIMI_BYTES) + 1) * KIMI_BYTES
    assert not any(n.startswith("device pool estimated") for n in plan.notes)
    assert plan.device_pool_source is None


def test_a_small_size_is_not_refused_against_the_upper_bound() -> None:
    """SGLang 0.5.9 refuses a host pool not larger than the device pool; size 12 GB/rank holds
    170,765 tokens, fewer than the estimate's 209,119 but more than the 159,274 the field notes'
    host logged: the estimate, an upper bound, must not refuse it."""
    plan = make_plan(ChangeRequest(size_gb=12), kimi(), HostMemory(445 * GB))
    host_tokens = int(12 * GB // KIMI_BYTES) + 1
    assert 159_274 < host_tokens < sglang_tokens(GPU, 0.896, KIMI_WEIGHTS // 8, KIMI_BYTES)
    assert plan.per_rank_tokens == host_tokens
    assert plan.verdict is Verdict.FITS


@pytest.mark.parametrize(
    ("gpu", "weights", "fraction", "needle"),
    [
        (0, 0, 0.9, "GPU memory must be positive"),
        (GPU, -1, 0.9, "weights per rank must be >= 0"),
        (GPU, 0, 1.5, "mem_fraction_static 1.5 is not in (0, 1]"),
        (GPU, 0, float("nan"), "mem_fraction_static nan"),
    ],
)
def test_bad_device_memory_is_refused_with_the_value(
    gpu: int, weights: int, fraction: float, needle: str
) -> None:
    """Figures no GPU has are rejected by name before any plan is made."""
    with pytest.raises(PlanInputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        DeviceMemory(gpu, weights, fraction, fraction_given=True)


def test_max_total_tokens_caps_the_estimate() -> None:
    """SGLang takes min(profiled, --max-total-tokens): with a cap of 16,384 (the tiny model
    make test-real serves) ratio 4 is 16,384 x 4 + one page = 65,537 tokens."""
    memory = DeviceMemory(24 * GIB, 0, 0.844, fraction_given=False, max_total_tokens=16_384)
    shape = KvShape("MHA", 2 * 2 * 16 * 2, 2)  # 2 KV heads x 16 head dim, K and V, bf16
    server = ServerFacts(ranks=1, kv_shape=shape, device_memory=memory)
    plan = make_plan(ChangeRequest(ratio=4), server, HostMemory(445 * GB))
    assert plan.device_pool_estimate is not None
    assert plan.device_pool_estimate.tokens == 16_384
    assert plan.device_tokens == 16_384
    assert plan.per_rank_tokens == 16_384 * 4 + 1
    assert plan.per_rank_bytes == (16_384 * 4 + 1) * 256


def test_a_cap_of_no_tokens_is_refused() -> None:
    """--max-total-tokens 0 is not a pool size."""
    with pytest.raises(PlanInputError, match="--max-total-tokens 0 must be at least 1 token"):
        DeviceMemory(GPU, 0, 0.9, fraction_given=True, max_total_tokens=0)


FRACTIONS = [round(0.5 + 0.01 * step, 2) for step in range(46)]  # 0.50 to 0.95


@pytest.mark.parametrize("name", profile_names())
def test_the_estimate_is_never_below_the_simulated_pool(name: str) -> None:
    """On every simulator profile and every fraction from 0.50 to 0.95, the estimate from the
    profile's model files and GPU is at least the pool the simulator logs; where it finds no
    room for a pool, the simulator's pool is empty too. It failed before the fix: the small
    profiles logged 150,000 tokens at 0.7, more than 24 GiB x 0.7 less their 12.5 GiB of weights
    holds (131,406), so the estimate with its 10% margin (144,547) was 3.6% below."""
    profile = load_profile(name)
    model = model_dir(name)
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    index = json.loads((model / "model.safetensors.index.json").read_text(encoding="utf-8"))
    ranks = profile.gpu_count  # every shipped profile runs TP over all its GPUs
    per_token = kv_shape_from_config(config, ranks).bytes_per_token
    assert per_token == profile.kv_bytes_per_token
    compared = 0
    for fraction in FRACTIONS:
        memory = DeviceMemory(
            gpu_memory_bytes=profile.gpu_memory_bytes,
            weights_bytes_per_rank=index["metadata"]["total_size"] // ranks,
            mem_fraction_static=fraction,
            fraction_given=True,
        )
        estimate = estimate_device_pool(memory, per_token)
        logged = profile.device_tokens_at(fraction)
        if isinstance(estimate, str):
            assert logged == 0, (fraction, estimate)
            continue
        assert estimate.tokens >= logged, (fraction, estimate.tokens, logged)
        compared += logged > 0
    assert compared >= 10  # the profile's pools were compared, not only its empty ones
