"""Every host pool of one rank, planned by SGLang 0.5.23's rules (docs/sglang.md, Host pools):
a hybrid model's two pools, a decode server's offload pool and retraction backup, buffer_only's
default ratio, Mooncake's segment, and the refusal of what the planner does not know.

The expected figures are worked out by hand in each test from the rule, never by the planner.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.planner import (
    GB,
    ChangeRequest,
    DevicePool,
    HostMemory,
    ServerFacts,
    SGLangVersion,
    Verdict,
    make_plan,
)
from bot.planner._host_pools import (
    HostPoolFlags,
    HybridPools,
    MooncakeSegment,
    default_ratio,
    mooncake_segment,
    parse_extra_config,
    parse_segment_size,
)
from bot.vocab import RefusedBy
from tests._examples import examples

GiB = 1024**3
PLENTY = HostMemory(available_bytes=2000 * GB)
V0523 = SGLangVersion.parse("0.5.23")
V059 = SGLangVersion.parse("0.5.9")
# A hybrid model's pools as 0.5.23 logs them (full_layer_tokens=32997, swa_layer_tokens=26397),
# the full-attention layers at 9,216 B per token, the sliding-window layers at 4,608 B.
HYBRID = HybridPools(
    full_tokens=32997, swa_tokens=26397, full_bytes_per_token=9216, swa_bytes_per_token=4608
)
KIMI = DevicePool(tokens=159274, bytes_per_token=70272)


def hybrid_server(version: SGLangVersion = V0523, **kwargs: object) -> ServerFacts:
    pool = DevicePool(tokens=HYBRID.full_tokens, bytes_per_token=HYBRID.full_bytes_per_token)
    return ServerFacts(ranks=4, device_pool=pool, version=version, hybrid_pools=HYBRID, **kwargs)  # type: ignore[arg-type]


def pools(plan: object) -> dict[str, int]:
    return {pool.name: pool.bytes for pool in plan.host_pools}  # type: ignore[attr-defined]


def test_ratio_2_on_a_hybrid_model_gives_each_pool_twice_its_own_tokens() -> None:
    """Ratio 2: the full pool int(32,997 x 2) + 1 tokens at 9,216 B, the sliding-window pool
    int(26,397 x 2) + 1 at 4,608 B; the rank needs both, and the sentence shows both."""
    plan = make_plan(ChangeRequest(ratio=2), hybrid_server(), PLENTY)
    full, swa = 65995 * 9216, 52795 * 4608
    assert pools(plan) == {"KV": full, "swa": swa}
    assert plan.per_rank_total_bytes == full + swa
    assert plan.total_bytes == 4 * (full + swa)
    assert f"{swa / GB:.2f} GB swa" in plan.reason


def test_size_10_on_0_5_23_splits_the_10_gb_by_the_pools_device_bytes() -> None:
    """0.5.23 gives the full pool 10 x 32,998 x 9,216 / (32,998 x 9,216 + 26,398 x 4,608) GB
    (7.1429 GB: 775,053 tokens with the extra page) and the sliding-window pool the rest
    (620,033 tokens): 10 GB per rank in all, plus the two extra pages."""
    plan = make_plan(ChangeRequest(size_gb=10), hybrid_server(), PLENTY)
    assert pools(plan) == {"KV": 775053 * 9216, "swa": 620033 * 4608}
    assert plan.per_rank_total_bytes == 10_000_000_512


def test_size_10_before_0_5_23_gives_10_gb_to_each_pool() -> None:
    """0.5.9 gives each pool the whole 10 GB: 10e9 // 9,216 + 1 and 10e9 // 4,608 + 1 tokens,
    20 GB per rank, which the budget must count."""
    plan = make_plan(ChangeRequest(size_gb=10), hybrid_server(V059), PLENTY)
    assert pools(plan) == {"KV": 1085070 * 9216, "swa": 2170139 * 4608}
    tight = HostMemory(available_bytes=(10 + 40) * GB + 10 * GiB + 4 * 15 * GB)
    assert make_plan(ChangeRequest(size_gb=10), hybrid_server(V059), tight).fits is False
    assert make_plan(ChangeRequest(size_gb=10), hybrid_server(V0523), tight).fits is True


def test_decode_offload_adds_a_second_kv_pool_of_the_same_size() -> None:
    """A decode server with offload keeps the HiCache KV pool and the offload manager's own,
    both int(159,274 x 2) + 1 tokens at 70,272 B."""
    flags = HostPoolFlags(disaggregation_mode="decode", decode_offload=True, storage_backend="file")
    server = ServerFacts(ranks=8, device_pool=KIMI, host_pool_flags=flags)
    plan = make_plan(ChangeRequest(ratio=2), server, PLENTY)
    each = 318549 * 70272
    assert pools(plan) == {"KV": each, "decode offload KV": each}
    assert plan.total_bytes == 8 * 2 * each
    assert "decode offload KV" in plan.reason


def test_mooncake_adds_its_segment_divided_by_tp_times_pp() -> None:
    """A 16 GiB Mooncake segment over TP 8 is 2 GiB per rank on top of the host pool (size 20:
    20e9 // 70,272 + 1 tokens); the largest size that fits leaves room for the segment."""
    segment = mooncake_segment({"master_server_address": "10.0.0.1:50051",
                                "global_segment_size": "16gb"}, {})  # fmt: skip
    flags = HostPoolFlags(storage_backend="mooncake", mooncake=segment, storage_ranks=8)
    server = ServerFacts(ranks=8, device_pool=KIMI, host_pool_flags=flags)
    plan = make_plan(ChangeRequest(size_gb=20), server, PLENTY)
    kv = (20 * GB // 70272 + 1) * 70272
    assert pools(plan) == {"KV": kv, "Mooncake segment": 2 * GiB}
    assert plan.total_bytes == 8 * (kv + 2 * GiB)
    # A budget of 8 x (10 GB + 2 GiB) + a little: size 10 fits, 11 does not.
    budget = 8 * ((10 * GB // 70272 + 1) * 70272 + 2 * GiB) + 1000
    memory = HostMemory(available_bytes=budget + 10 * GiB + 40 * GB)
    assert make_plan(ChangeRequest(size_gb=12), server, memory).largest_fitting_size_gb == 10


def test_decode_offload_with_mooncake_has_a_segment_per_storage_client() -> None:
    """The offload manager opens its own Mooncake client: two segments per rank, 4 GiB // 2
    each (Mooncake's 4 GiB default, TP 2)."""
    segment = mooncake_segment({"client_server_address": "127.0.0.1:50052"}, {})
    flags = HostPoolFlags(
        disaggregation_mode="decode",
        decode_offload=True,
        storage_backend="mooncake",
        mooncake=segment,
        storage_ranks=2,
    )
    plan = make_plan(
        ChangeRequest(size_gb=5),
        ServerFacts(ranks=2, device_pool=KIMI, host_pool_flags=flags),
        PLENTY,
    )
    named = pools(plan)
    assert named["Mooncake segment"] == named["Mooncake segment (decode offload)"] == 2 * GiB


@pytest.mark.parametrize(
    ("value", "expected"),
    [("16gb", 16 * GiB), (" 4GB ", 4 * GiB), ("1073741824", 1 << 30), (123, 123)],
)
def test_segment_sizes_read_as_mooncake_reads_them(value: object, expected: int) -> None:
    """ "16gb" is GiB, a bare number bytes, an int bytes."""
    assert parse_segment_size(value) == expected


def test_a_fractional_gb_segment_is_an_error_as_in_sglang() -> None:
    """ "1.5gb" is not a whole number before "gb": SGLang's int() raises, and so does ours."""
    with pytest.raises(ValueError, match="invalid literal"):
        parse_segment_size("1.5gb")


def test_the_segment_comes_from_the_extra_config_then_the_file_then_the_environment() -> None:
    """The extra config wins when it names an address (its missing size is 4 GiB even when the
    environment says 8gb); then SGLANG_HICACHE_MOONCAKE_CONFIG_PATH's file; then
    MOONCAKE_GLOBAL_SEGMENT_SIZE, which needs MOONCAKE_MASTER or MOONCAKE_CLIENT."""
    env = {"MOONCAKE_MASTER": "m:1", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "8gb"}
    assert mooncake_segment({"master_server_address": "m:1"}, env).global_bytes == 4 * GiB
    assert mooncake_segment({}, env).global_bytes == 8 * GiB
    file_env = {**env, "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": "/etc/mc.json"}
    from_file = mooncake_segment(
        None, file_env, {"master_server_address": "m:1", "global_segment_size": 1 << 20}
    )
    assert from_file.global_bytes == 1 << 20
    assert from_file.source == "/etc/mc.json"
    missing = mooncake_segment(None, {})
    assert missing.global_bytes is None
    assert missing.problem is not None
    assert "MOONCAKE_MASTER" in missing.problem


def test_a_standalone_mooncake_client_holds_the_segment_outside_the_server() -> None:
    """standalone_storage: the segment is the client's, so the server's rank adds 0 for it."""
    segment = mooncake_segment(
        {"client_server_address": "c:1", "standalone_storage": True, "global_segment_size": "8gb"},
        {},
    )
    flags = HostPoolFlags(storage_backend="mooncake", mooncake=segment)
    plan = make_plan(
        ChangeRequest(size_gb=5),
        ServerFacts(ranks=1, device_pool=KIMI, host_pool_flags=flags),
        PLENTY,
    )
    assert pools(plan)["Mooncake segment"] == 0


def test_the_extra_config_is_json_or_an_at_file() -> None:
    """A JSON object, or @path read through the given reader; anything else is a ValueError."""
    assert parse_extra_config('{"a": 1}') == {"a": 1}
    assert parse_extra_config("@/x/c.json", lambda path: '{"b": 2}') == {"b": 2}
    for bad in ("[1]", "{not json", "@/x/c.toml"):
        with pytest.raises(ValueError, match="extra config"):
            parse_extra_config(bad, lambda path: "{}")


def test_buffer_only_starts_from_ratio_1_2() -> None:
    """buffer_only's default ratio is 1.2, a cache's 2."""
    assert default_ratio(HostPoolFlags(host_memory_mode="buffer_only"), True)[0] == 1.2
    assert default_ratio(HostPoolFlags(), True)[0] == 2.0


def test_the_decode_retraction_backup_starts_from_0_2_raised_for_the_longest_request() -> None:
    """Backup only (no HiCache): 0.2, unless the longest request (131,072 + 4 - 1 tokens) needs
    more of a 150,430-token pool: 131,075 / 150,430; twice that with host receive."""
    decode = HostPoolFlags(disaggregation_mode="decode")
    assert default_ratio(decode, False, "MHA", 1_000_000, 131075)[0] == 0.2
    assert default_ratio(decode, False, "MHA", 150430, 131075)[0] == 131075 / 150430
    doubled = default_ratio(decode, False, "MHA", 150430, 131075, host_receive=True)[0]
    assert doubled == 2 * 131075 / 150430
    # Unknown context length: the whole device pool is the most the floor can ask.
    assert default_ratio(decode, False, "MHA", 150430, None)[0] == 1.0
    # With HiCache on, the pool is shared with prefix caching: SGLang's usual 2.
    assert default_ratio(decode, True, "MHA", 150430, 131075)[0] == 2.0
    # MLA models and decode offload keep CPU tensors, not a pool: the usual 2 applies.
    assert default_ratio(decode, False, "MLA", 150430, 131075)[0] == 2.0
    offload = dataclasses.replace(decode, decode_offload=True, storage_backend="file")
    assert default_ratio(offload, False, "MHA", 150430, 131075)[0] == 2.0


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (HostPoolFlags(storage_backend="hf3fs"), "'hf3fs'"),
        (HostPoolFlags(host_memory_mode="spill"), "'spill'"),
        (HostPoolFlags(disaggregation_mode="encode"), "'encode'"),
        (HostPoolFlags(disaggregation_mode="decode", retraction_backup="disk"), "'disk'"),
        (
            HostPoolFlags(
                storage_backend="mooncake",
                mooncake=MooncakeSegment(None, "the environment", problem="nothing configures it"),
            ),
            "nothing configures it",
        ),
    ],
)
def test_a_configuration_the_planner_does_not_know_is_refused_naming_it(
    flags: HostPoolFlags, named: str
) -> None:
    """An unknown value is refused (missing facts) naming it, with no pool planned; the same
    server without it plans and fits, so the refusal is that value's alone."""
    server = ServerFacts(ranks=2, device_pool=KIMI, host_pool_flags=flags)
    plan = make_plan(ChangeRequest(size_gb=30), server, PLENTY)
    assert plan.verdict is Verdict.REFUSED
    assert plan.refused_by is RefusedBy.MISSING_FACTS
    assert named in plan.reason
    assert plan.host_pools == ()
    assert plan.total_bytes is None
    known = dataclasses.replace(server, host_pool_flags=HostPoolFlags())
    assert make_plan(ChangeRequest(size_gb=30), known, PLENTY).fits


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (HostPoolFlags(host_memory_mode="buffer_only"), "needs a storage backend"),
        (
            HostPoolFlags(
                host_memory_mode="buffer_only", storage_backend="file", disaggregation_mode="decode"
            ),
            "not supported on a decode server",
        ),
        (HostPoolFlags(decode_offload=True, storage_backend="file"), "only for a decode server"),
        (
            HostPoolFlags(disaggregation_mode="decode", decode_offload=True),
            "needs --hicache-storage",
        ),
    ],
)
def test_what_sglang_itself_refuses_is_refused_as_sglang(flags: HostPoolFlags, said: str) -> None:
    """Flags SGLang raises ValueError on at start are refused as SGLang's rule."""
    server = ServerFacts(ranks=1, device_pool=KIMI, host_pool_flags=flags)
    plan = make_plan(ChangeRequest(size_gb=10), server, PLENTY)
    assert plan.refused_by is RefusedBy.SGLANG
    assert said in plan.reason


def test_the_plan_dict_lists_each_pool_with_its_rule() -> None:
    """to_dict carries host_pools (name, bytes, tokens, rule, gb), JSON-ready."""
    import json

    data = make_plan(ChangeRequest(ratio=2), hybrid_server(), PLENTY).to_dict()
    json.dumps(data)
    assert [pool["name"] for pool in data["host_pools"]] == ["KV", "swa"]
    assert data["host_pools"][1]["tokens"] == 52795
    assert data["host_extra_bytes_per_rank"] == {"swa": 52795 * 4608}


@settings(max_examples=examples(200), deadline=None)
@given(
    size=st.integers(1, 500),
    page=st.sampled_from([1, 16, 64]),
    full=st.integers(1, 2_000_000),
    swa=st.integers(1, 2_000_000),
    full_bpt=st.integers(1, 200_000),
    swa_bpt=st.integers(1, 200_000),
)
def test_a_hybrid_size_is_n_gb_in_all_from_0_5_23_and_n_gb_each_before(
    size: int, page: int, full: int, swa: int, full_bpt: int, swa_bpt: int
) -> None:
    """0.5.23's split keeps the rank at N GB, plus at most a page of each pool; before 0.5.23
    each pool alone holds at least N GB."""
    pools = HybridPools(full, swa, full_bpt, swa_bpt)
    pool = DevicePool(tokens=full, bytes_per_token=full_bpt)
    split = ServerFacts(
        ranks=1, device_pool=pool, page_size=page, version=V0523, hybrid_pools=pools
    )
    total = make_plan(ChangeRequest(size_gb=size), split, PLENTY).per_rank_total_bytes
    assert total is not None
    assert size * GB - 1 <= total <= size * GB + page * (full_bpt + swa_bpt)
    each = dataclasses.replace(split, version=V059)
    named = make_plan(ChangeRequest(size_gb=size), each, PLENTY)
    assert all(p.bytes >= size * GB for p in named.host_pools)
    assert named.per_rank_total_bytes == sum(p.bytes for p in named.host_pools)
