"""Bytes per token: from the model's config.json, else the logged pool (snapped or its upper
bound), and what the Plan says about them. Expected figures are SGLang's rule written out here
(docs/sglang.md, Host pool sizing) on the field notes' numbers, never the planner's output."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bot.errors import PlanInputError
from bot.planner import (
    GB,
    BytesSource,
    ChangeRequest,
    DevicePool,
    HostMemory,
    ServerFacts,
    SGLangVersion,
    kv_shape_from_config,
    make_plan,
)
from tests._examples import examples

# Kimi-K2.5 / DeepSeek-V3 shape: MLA, kv_lora_rank 512 + qk_rope_head_dim 64, 61 layers, bf16.
DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 128,
    "hidden_size": 7168,
    "torch_dtype": "bfloat16",
}
TRUE_BYTES = (512 + 64) * 61 * 2  # 70,272
LLAMA_3_70B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 8192,
    "torch_dtype": "bfloat16",
}
# The field notes' pool: "#tokens: 159274, KV size: 10.42 GB", page size 1.
LOGGED = DevicePool.from_log(tokens=159274, kv_gib=10.42)
PLENTY = HostMemory(available_bytes=2000 * GB)


def sglang_ratio_bytes(tokens: int, ratio: float, page: int, per_token: int) -> int:
    """SGLang's host pool bytes for a ratio: int(tokens x ratio), page aligned, one more page."""
    return (int(tokens * ratio) // page + 1) * page * per_token


def sglang_size_tokens(size_gb: int, page: int, per_token: int) -> int:
    """SGLang's host pool tokens for --hicache-size: int(N x 1e9 // bytes), one more page."""
    return (int(size_gb * 1e9 // per_token) // page + 1) * page


def facts(config: dict[str, Any] | None = None, **kwargs: Any) -> ServerFacts:
    shape = None if config is None else kv_shape_from_config(config, tp_size=8)
    return ServerFacts(ranks=8, device_pool=LOGGED, kv_shape=shape, **kwargs)


def test_ratio_4_with_the_config_is_sglangs_figure_to_the_byte() -> None:
    """ratio 4 on 159,274 tokens / 10.42 GB with the config gives 44,770,080,384 bytes."""
    plan = make_plan(ChangeRequest(ratio=4), facts(DEEPSEEK_V3), PLENTY)
    assert plan.per_rank_bytes == sglang_ratio_bytes(159274, 4, 1, TRUE_BYTES) == 44_770_080_384
    assert isinstance(plan.per_rank_bytes, int)
    assert plan.bytes_per_token_source is BytesSource.CONFIG
    assert plan.bytes_per_token_uncertainty == 0


def test_ratio_4_without_the_config_is_at_least_sglangs_within_0_05_percent() -> None:
    """From the log alone the plan errs toward more RAM, by less than 0.05%."""
    plan = make_plan(ChangeRequest(ratio=4), facts(), PLENTY)
    sglang = sglang_ratio_bytes(159274, 4, 1, TRUE_BYTES)
    assert plan.per_rank_bytes is not None
    assert sglang <= plan.per_rank_bytes <= sglang * 1.0005
    assert plan.bytes_per_token_source is BytesSource.LOG_UPPER_BOUND
    assert plan.bytes_per_token_low is not None
    assert plan.bytes_per_token_high is not None
    assert plan.bytes_per_token_low <= TRUE_BYTES <= plan.bytes_per_token_high
    assert 0 < (plan.bytes_per_token_uncertainty or 0) < 0.001


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_size_48_is_683061_tokens_with_the_config_and_never_more_without(version: str) -> None:
    """--hicache-size 48 gives SGLang's 683,061 host tokens on both eras with the config."""
    sglang = sglang_size_tokens(48, 1, TRUE_BYTES)
    assert sglang == 683061
    era = SGLangVersion.parse(version)
    exact = make_plan(ChangeRequest(size_gb=48), facts(DEEPSEEK_V3, version=era), PLENTY)
    assert exact.per_rank_tokens == sglang
    assert exact.per_rank_bytes == sglang * TRUE_BYTES
    bound = make_plan(ChangeRequest(size_gb=48), facts(version=era), PLENTY)
    assert bound.per_rank_tokens is not None
    assert bound.per_rank_tokens <= sglang


def test_snapping_to_a_layers_bytes_makes_the_log_exact() -> None:
    """Knowing one MLA bf16 layer is 1,152 B, 10.42 GiB / (159,274 + 1) is 61 layers exactly."""
    plan = make_plan(ChangeRequest(ratio=4), facts(layer_bytes=576 * 2), PLENTY)
    assert plan.bytes_per_token == TRUE_BYTES
    assert plan.bytes_per_token_source is BytesSource.LOG
    assert plan.per_rank_bytes == sglang_ratio_bytes(159274, 4, 1, TRUE_BYTES)


def test_an_fp8_kv_cache_halves_the_bytes() -> None:
    """--kv-cache-dtype fp8_e4m3 stores one byte per element: half of bf16's bytes."""
    bf16 = kv_shape_from_config(DEEPSEEK_V3)
    fp8 = kv_shape_from_config(DEEPSEEK_V3, kv_cache_dtype="fp8_e4m3")
    assert fp8.bytes_per_token * 2 == bf16.bytes_per_token == TRUE_BYTES
    pool = DevicePool(tokens=159274)
    plans = [
        make_plan(
            ChangeRequest(ratio=4), ServerFacts(ranks=8, device_pool=pool, kv_shape=s), PLENTY
        )
        for s in (bf16, fp8)
    ]
    assert plans[0].per_rank_bytes == 2 * (plans[1].per_rank_bytes or 0)


@pytest.mark.parametrize(
    ("tp", "expected"), [(1, 327_680), (2, 163_840), (8, 40_960), (16, 40_960)]
)
def test_mha_splits_kv_heads_over_tp_as_sglang_does(tp: int, expected: int) -> None:
    """Llama-3-70B: 2 x 8 KV heads x 128 x 80 layers x 2 B = 327,680 B at TP 1; heads split
    over TP, and never below one head per rank (TP 16 replicates)."""
    heads_per_rank = max(1, 8 // tp)
    assert expected == 2 * heads_per_rank * 128 * 80 * 2
    assert kv_shape_from_config(LLAMA_3_70B, tp_size=tp).bytes_per_token == expected


def test_a_multimodal_models_figures_are_read_under_text_config() -> None:
    """Kimi-K2.5 keeps its language model's shape under text_config."""
    config = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": DEEPSEEK_V3}
    assert kv_shape_from_config(config).bytes_per_token == TRUE_BYTES


def test_draft_layers_packed_into_the_pool_are_counted_when_the_log_shows_them() -> None:
    """A pool logged at 62 layers' size (61 + 1 MTP layer) is planned at 62 x 1,152 B."""
    packed = 62 * 1152
    kv_gib = round((159274 + 1) * packed / 1024**3, 2)
    server = ServerFacts(
        ranks=8,
        device_pool=DevicePool.from_log(159274, kv_gib),
        kv_shape=kv_shape_from_config(DEEPSEEK_V3),
    )
    plan = make_plan(ChangeRequest(ratio=4), server, PLENTY)
    assert plan.bytes_per_token == packed
    assert plan.bytes_per_token_source is BytesSource.CONFIG
    assert any("draft (MTP) layers packed" in note for note in plan.notes)


def test_plan_text_shows_gb_to_sglangs_two_decimals() -> None:
    """The reason shows the per-rank GB as SGLang logs it: 44.77."""
    plan = make_plan(ChangeRequest(ratio=4), facts(DEEPSEEK_V3), PLENTY)
    assert "8 ranks x 44.77 GB" in plan.reason


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"kv_lora_rank": 512, "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}, "num_hidden"),
        ({**DEEPSEEK_V3, "torch_dtype": "int3"}, "'int3' is not one kimi-ops knows"),
        ({**LLAMA_3_70B, "num_key_value_heads": "eight"}, "num_key_value_heads 'eight'"),
        ({k: v for k, v in DEEPSEEK_V3.items() if k != "torch_dtype"}, "no torch_dtype"),
    ],
)
def test_a_config_without_the_figures_is_refused_by_name(
    config: dict[str, Any], needle: str
) -> None:
    """A config.json that lacks or garbles a figure raises PlanInputError naming it."""
    with pytest.raises(PlanInputError, match=needle):
        kv_shape_from_config(config)


# A pool as SGLang logs it: any token count, a true bytes per token of whole layers, a page size.
TOKENS = st.integers(1_000, 3_000_000)
LAYER_BYTES = st.sampled_from([576, 656, 1152, 256, 512, 2048])
LAYERS = st.integers(1, 128)
PAGES = st.sampled_from([1, 16, 64])


@settings(max_examples=examples(300), deadline=None)
@given(
    tokens=TOKENS,
    unit=LAYER_BYTES,
    layers=LAYERS,
    page=PAGES,
    ratio=st.floats(0.5, 8.0, allow_nan=False),
)
def test_planned_bytes_are_never_below_sglangs_on_the_true_bytes_per_token(
    tokens: int, unit: int, layers: int, page: int, ratio: float
) -> None:
    """For any pool as SGLang logs it (tokens + one page of rows, GiB to two decimals), a ratio
    planned from the log alone needs at least what SGLang allocates on the true figure."""
    true_bytes = unit * layers
    kv_gib = round((tokens + page) * true_bytes / 1024**3, 2)
    assume(kv_gib >= 0.01)
    server = ServerFacts(ranks=1, device_pool=DevicePool.from_log(tokens, kv_gib), page_size=page)
    plan = make_plan(ChangeRequest(ratio=ratio), server, PLENTY)
    assert plan.per_rank_bytes is not None
    assert plan.per_rank_bytes >= sglang_ratio_bytes(tokens, ratio, page, true_bytes)
    snapped = make_plan(
        ChangeRequest(ratio=ratio),
        ServerFacts(
            ranks=1,
            device_pool=DevicePool.from_log(tokens, kv_gib),
            page_size=page,
            layer_bytes=unit,
        ),
        PLENTY,
    )
    assert snapped.per_rank_bytes is not None
    assert snapped.per_rank_bytes >= sglang_ratio_bytes(tokens, ratio, page, true_bytes)
    assert math.isfinite(snapped.per_rank_bytes)


@settings(max_examples=examples(300), deadline=None)
@given(tokens=TOKENS, unit=LAYER_BYTES, layers=LAYERS, page=PAGES, size_gb=st.integers(1, 400))
def test_planned_size_bytes_are_never_below_sglangs_and_tokens_never_above(
    tokens: int, unit: int, layers: int, page: int, size_gb: int
) -> None:
    """For --hicache-size from the log alone, the planned bytes cover what SGLang allocates on
    the true figure, and the planned tokens never promise more than SGLang makes."""
    true_bytes = unit * layers
    kv_gib = round((tokens + page) * true_bytes / 1024**3, 2)
    assume(kv_gib >= 0.01)
    server = ServerFacts(ranks=1, device_pool=DevicePool.from_log(tokens, kv_gib), page_size=page)
    plan = make_plan(ChangeRequest(size_gb=size_gb), server, PLENTY)
    sglang_tokens = sglang_size_tokens(size_gb, page, true_bytes)
    assert plan.per_rank_bytes is not None
    assert plan.per_rank_tokens is not None
    assert plan.per_rank_bytes >= sglang_tokens * true_bytes
    assert plan.per_rank_tokens <= sglang_tokens
