"""The planner against the field notes' numbers and SGLang's own rules (docs/sglang.md)."""

from __future__ import annotations

import math

import pytest

from bot.errors import PlanInputError
from bot.planner import (
    GB,
    ChangeRequest,
    DevicePool,
    GiB,
    HostMemory,
    ServerFacts,
    SGLangVersion,
    StartSample,
    Verdict,
    make_plan,
)

# Kimi-K2.5 is MLA with DeepSeek-V3's shape: (512 + 64) x 2 bytes (bf16) x 61 layers.
KIMI_BYTES_PER_TOKEN = 576 * 2 * 61  # 70,272
# The device pool the field notes' ratio-4 operator had: logged as "KV size: 10.42 GB" (GiB).
KIMI_POOL_LOGGED = DevicePool.from_log(tokens=159274, kv_gib=10.42)
KIMI_POOL_EXACT = DevicePool(tokens=159274, bytes_per_token=KIMI_BYTES_PER_TOKEN)
RESERVE = 10 * 1024**3


def kimi(pool: DevicePool = KIMI_POOL_LOGGED, **kwargs: object) -> ServerFacts:
    return ServerFacts(ranks=8, device_pool=pool, **kwargs)  # type: ignore[arg-type]


def test_size_300_per_rank_on_the_449_gb_host_is_refused() -> None:
    """8 ranks x --hicache-size 300 asks for 2.4 TB on a host with 445 GB available."""
    plan = make_plan(ChangeRequest(size_gb=300), kimi(), HostMemory(445 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert plan.total_bytes is not None
    assert plan.total_bytes >= 8 * 300 * GB
    assert "8 ranks x 300.00 GB = 2400.0 GB" in plan.reason
    assert "445.0 GB free after stop" in plan.reason


def test_size_48_per_rank_fits_the_same_host() -> None:
    """The operator's corrected --hicache-size 48 (384 GB in all) fits 445 GB available."""
    plan = make_plan(ChangeRequest(size_gb=48), kimi(), HostMemory(445 * GB))
    assert plan.verdict is Verdict.FITS
    # 445 - 10 GiB - 40 = 394.26 GB budget; 8 x 48 GB (+ one token each) = 384.0 GB.
    assert plan.budget_bytes == pytest.approx(445 * GB - RESERVE - 40 * GB)
    assert plan.headroom_left_bytes == pytest.approx(
        445 * GB - RESERVE - 40 * GB - 384 * GB, rel=1e-4
    )
    assert plan.reason.endswith("GB to spare.")


def test_ratio_4_on_a_10_42_gib_pool_predicts_44_75_gb_per_rank() -> None:
    """10.42 GiB x 4 = 44.75e9 bytes per rank (the operator guessed 41.6; SGLang logged 44.77)."""
    plan = make_plan(
        ChangeRequest(ratio=4), kimi(), HostMemory(396 * GB, server_held_bytes=200 * GB)
    )
    assert plan.per_rank_gb is not None
    assert plan.per_rank_gb == pytest.approx(44.75, rel=1e-3)
    assert plan.per_rank_gb == pytest.approx(44.77, rel=1e-3)  # what SGLang allocated
    assert plan.total_gb == pytest.approx(358.0, rel=1e-3)
    assert plan.verdict is Verdict.FITS  # 396 + ~200 held by the ratio-2 server it replaces


def test_ratio_4_needs_the_ram_the_running_server_releases() -> None:
    """Without counting the ratio-2 server's ~200 GB, 396 GB available would not hold 358 GB."""
    plan = make_plan(ChangeRequest(ratio=4), kimi(), HostMemory(396 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert "short" in plan.reason


def test_ratio_4_with_exact_bytes_per_token_matches_sglang_to_the_hundredth() -> None:
    """With the model's 70,272 B/token, ratio 4 of 159,274 tokens is SGLang's 44.77 GB."""
    plan = make_plan(ChangeRequest(ratio=4), kimi(KIMI_POOL_EXACT), HostMemory(600 * GB))
    # int(159274 * 4) = 637096 tokens; // 1 + 1 page = 637097; x 70272 B = 44,770,080,384 B.
    assert plan.per_rank_tokens == 637097
    assert f"{plan.per_rank_gb:.2f}" == "44.77"


def test_ratio_from_kv_gib_alone_gives_bytes_without_tokens() -> None:
    """A pool known only as '10.42 GB' (GiB) still sizes a ratio: 4 x 10.42 GiB."""
    pool = DevicePool(kv_bytes=10.42 * GiB)
    plan = make_plan(ChangeRequest(ratio=4), kimi(pool), HostMemory(600 * GB))
    assert plan.per_rank_tokens is None
    assert plan.per_rank_bytes == pytest.approx(4 * 10.42 * 1024**3)


@pytest.mark.parametrize(
    ("page_size", "expected_tokens"),
    [
        # int(1e9 // 70272) = 14230 tokens
        (1, 14231),  # 14230 // 1 + 1 = 14231 pages of 1
        (64, 14272),  # 14230 // 64 + 1 = 223 pages of 64 = 14272
    ],
)
def test_page_alignment_always_adds_one_page(page_size: int, expected_tokens: int) -> None:
    """SGLang rounds the host pool down to pages and adds one more page, even when aligned."""
    plan = make_plan(
        ChangeRequest(size_gb=1),
        ServerFacts(ranks=1, device_pool=KIMI_POOL_EXACT, page_size=page_size),
        HostMemory(600 * GB),
    )
    assert plan.per_rank_tokens == expected_tokens
    assert plan.per_rank_bytes == expected_tokens * KIMI_BYTES_PER_TOKEN


def test_size_48_tokens_match_sglang_0_5_23s_log() -> None:
    """0.5.23 logs 'host pool: 683061 tokens, 48.00 GB' for size 48 at 70,272 B/token."""
    plan = make_plan(ChangeRequest(size_gb=48), kimi(KIMI_POOL_EXACT), HostMemory(600 * GB))
    assert plan.per_rank_tokens == 683061
    assert f"{plan.per_rank_gb:.2f}" == "48.00"


def test_size_wins_over_ratio_when_both_are_given() -> None:
    """As in SGLang (and /get_server_info showing ratio 2.0 beside size 48), the size counts."""
    both = make_plan(ChangeRequest(ratio=2, size_gb=48), kimi(), HostMemory(445 * GB))
    size_only = make_plan(ChangeRequest(size_gb=48), kimi(), HostMemory(445 * GB))
    assert both.per_rank_bytes == size_only.per_rank_bytes
    assert any("ratio 2 is ignored" in warning for warning in both.warnings)


@pytest.mark.parametrize(
    ("request_", "needle"),
    [
        (
            ChangeRequest(size_gb=44.5),
            "'44.5' is not a whole number of GB; SGLang takes integers (try 44 or 45)",
        ),
        (ChangeRequest(size_gb=0), "'0' must be at least 1 GB per rank"),
        (ChangeRequest(size_gb=-3), "'-3' must be at least 1 GB per rank"),
        (ChangeRequest(size_gb=math.inf), "'inf' is not a whole number"),
        (ChangeRequest(ratio=math.nan), "ratio 'nan' is not a finite number"),
        (ChangeRequest(ratio=math.inf), "ratio 'inf' is not a finite number"),
        (ChangeRequest(ratio=-1), "ratio '-1' must be greater than 0"),
        (ChangeRequest(ratio=0), "ratio '0' must be greater than 0"),
    ],
)
def test_what_sglang_would_reject_is_refused_with_the_reason(
    request_: ChangeRequest, needle: str
) -> None:
    """Values SGLang's parser or sizing would reject never reach a restart."""
    plan = make_plan(request_, kimi(), HostMemory(445 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert needle in plan.reason
    assert plan.total_bytes is None


def test_ratio_without_any_device_pool_figure_is_refused() -> None:
    """A ratio means nothing until the device pool is known; the reason suggests a size."""
    plan = make_plan(ChangeRequest(ratio=4), ServerFacts(ranks=8), HostMemory(445 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert "device pool" in plan.reason
    assert "size in GB" in plan.reason


def test_host_pool_not_larger_than_device_pool_is_refused_up_to_0_5_12() -> None:
    """SGLang <= 0.5.12 asserts the host pool is larger than the device pool."""
    plan = make_plan(
        ChangeRequest(ratio=0.5),
        kimi(KIMI_POOL_EXACT, version=SGLangVersion.parse("0.5.12")),
        HostMemory(445 * GB),
    )
    assert plan.verdict is Verdict.REFUSED
    assert "The host memory should be larger than the device memory" in plan.reason


def test_host_pool_not_larger_than_device_pool_only_warns_from_0_5_13() -> None:
    """Later versions log a warning and start; the plan fits and carries the warning."""
    plan = make_plan(
        ChangeRequest(ratio=0.5),
        kimi(KIMI_POOL_EXACT, version=SGLangVersion.parse("0.5.23")),
        HostMemory(445 * GB),
    )
    assert plan.verdict is Verdict.FITS
    assert any("not larger than the device pool" in w for w in plan.warnings)


def test_radix_cache_disabled_is_refused() -> None:
    """SGLang raises ValueError for HiCache with --disable-radix-cache."""
    plan = make_plan(
        ChangeRequest(size_gb=48), kimi(radix_cache_disabled=True), HostMemory(445 * GB)
    )
    assert plan.verdict is Verdict.REFUSED
    assert "--disable-radix-cache" in plan.reason


def test_cgroup_limit_caps_the_budget() -> None:
    """A 200 GB cgroup limit leaves 200 - 10.74 - 40 = 149.3 GB, too little for 8 x 48 GB."""
    plan = make_plan(
        ChangeRequest(size_gb=48), kimi(), HostMemory(445 * GB, cgroup_limit_bytes=200 * GB)
    )
    assert plan.verdict is Verdict.REFUSED
    assert plan.budget_bytes == pytest.approx(200 * GB - RESERVE - 40 * GB)
    assert plan.reason.startswith("the server's cgroup allows 200.0 GB: ")
    assert "capped by the cgroup's limit 200.0 GB; the host alone has 445.0" in plan.reason


def test_refusal_suggests_the_largest_size_that_fits() -> None:
    """On 445 GB available, 394.26 GB / 8 ranks = 49.28 GB: size 49 is the largest that fits."""
    plan = make_plan(ChangeRequest(size_gb=300), kimi(KIMI_POOL_EXACT), HostMemory(445 * GB))
    assert plan.largest_fitting_size_gb == 49
    assert "at most size 49 GB/rank fits" in plan.reason


def test_refused_ratio_suggests_the_largest_ratio_that_fits() -> None:
    """394.26 GB / 8 ranks / 11.19 GB per pool = 4.40: ratio 4.4 is the largest that fits."""
    plan = make_plan(ChangeRequest(ratio=8), kimi(KIMI_POOL_EXACT), HostMemory(445 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert plan.largest_fitting_ratio == pytest.approx(4.4)
    assert "at most ratio 4.4 fits" in plan.reason


def test_headroom_is_configurable() -> None:
    """With 0 GB headroom the budget is free RAM minus SGLang's 10 GiB reserve only."""
    plan = make_plan(ChangeRequest(size_gb=48), kimi(), HostMemory(445 * GB), headroom_gb=0)
    assert plan.budget_bytes == pytest.approx(445 * GB - RESERVE)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: ChangeRequest(),
        lambda: ServerFacts(ranks=0),
        lambda: ServerFacts(ranks=8, page_size=0),
        lambda: HostMemory(available_bytes=-1),
        lambda: HostMemory(available_bytes=math.nan),
        lambda: make_plan(ChangeRequest(size_gb=48), kimi(), HostMemory(445 * GB), headroom_gb=-5),
    ],
)
def test_malformed_inputs_raise_plan_input_error(bad: object) -> None:
    """Inputs no plan can be made from raise PlanInputError, a ValueError, with a message."""
    with pytest.raises(PlanInputError, match=r"\S"):
        bad()  # type: ignore[operator]


def test_plan_dict_has_the_keys_the_cli_and_api_promise() -> None:
    """to_dict carries verdict, reason and the GB figures, JSON-ready."""
    data = make_plan(ChangeRequest(size_gb=48), kimi(), HostMemory(445 * GB)).to_dict()
    for key in (
        "verdict",
        "reason",
        "per_rank_tokens",
        "per_rank_gb",
        "total_gb",
        "free_after_stop_gb",
        "headroom_left_gb",
    ):
        assert key in data
    assert data["verdict"] == "fits"
    assert data["free_after_stop_gb"] == 445.0


def test_no_suggestion_that_sglang_0_5_9_would_refuse() -> None:
    """130 GB available leaves 79.3 GB for 8 ranks: ~9.9 GB each, less than the 11.19 GB device
    pool, which SGLang <= 0.5.12 refuses; so no size or ratio is suggested."""
    plan = make_plan(ChangeRequest(ratio=4), kimi(KIMI_POOL_EXACT), HostMemory(130 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert not plan.largest_fitting_size_gb
    assert not plan.largest_fitting_ratio
    assert plan.reason.endswith("no HiCache size fits this host now.")


def test_a_server_in_a_14_gib_v1_cgroup_is_refused_naming_the_cgroup() -> None:
    """The issue's case: the server in /process_api/abc limited to 14 GiB (3 GB in use, all its
    own): size 2 x 2 ranks needs 4 GB where 14 GiB - 10 GiB reserve - 1 GB headroom leaves
    3.3 GB, so it is refused naming the cgroup, although the host alone would allow it."""
    cgroup = HostMemory(
        available_bytes=22.7 * GB,
        server_held_bytes=3 * GB,
        cgroup_limit_bytes=14 * GiB,
        cgroup_headroom_bytes=14 * GiB - 3 * GB,
        cgroup_path="/process_api/abc",
        total_bytes=25.3 * GB,
    )
    plan = make_plan(ChangeRequest(size_gb=2), ServerFacts(ranks=2), cgroup, headroom_gb=1)
    assert plan.verdict is Verdict.REFUSED
    assert plan.free_after_stop_bytes == 15_032_385_536
    assert plan.budget_bytes == pytest.approx(15_032_385_536 - 10 * GiB - 1 * GB)
    assert plan.reason.startswith("the server's cgroup /process_api/abc allows 15.0 GB: ")
    assert "the host alone has 25.3" in plan.reason
    host_only = HostMemory(22.7 * GB, server_held_bytes=3 * GB, total_bytes=25.3 * GB)
    alone = make_plan(ChangeRequest(size_gb=2), ServerFacts(ranks=2), host_only, headroom_gb=1)
    assert alone.verdict is Verdict.FITS
    assert "cgroup" not in alone.reason


def test_free_after_stop_never_exceeds_the_hosts_ram() -> None:
    """22.7 GB available and 3.3 GB counted as released on a 25.3 GB host: free after stop is
    the host's 25.3 GB, not 26.0 (the count is capped, and the sentence says so)."""
    memory = HostMemory(22.7 * GB, server_held_bytes=3.3 * GB, total_bytes=25.3 * GB)
    plan = make_plan(ChangeRequest(size_gb=2), ServerFacts(ranks=2), memory, headroom_gb=1)
    assert plan.free_after_stop_bytes == pytest.approx(25.3 * GB)
    assert "25.3 GB free after stop" in plan.reason
    assert "capped by the host's RAM" in plan.reason


def test_what_the_restart_frees_is_capped_by_the_cgroups_limit() -> None:
    """A headroom of 10 GB plus 8 GB counted as released inside a 14 GB limit gives 14 GB,
    never more than the limit."""
    memory = HostMemory(
        400 * GB,
        server_held_bytes=8 * GB,
        cgroup_limit_bytes=14 * GB,
        cgroup_headroom_bytes=10 * GB,
        cgroup_path="/system.slice/sglang.service",
    )
    plan = make_plan(ChangeRequest(size_gb=1), ServerFacts(ranks=1), memory, headroom_gb=0)
    assert plan.free_after_stop_bytes == 14 * GB
    assert plan.verdict is Verdict.FITS
    assert "in the server's cgroup /system.slice/sglang.service, limit 14.0 GB" in plan.reason


def test_a_cgroup_headroom_without_its_limit_is_bad_input() -> None:
    """A headroom with no limit beside it cannot be checked and is refused as input."""
    with pytest.raises(PlanInputError, match="needs the cgroup's limit"):
        HostMemory(400 * GB, cgroup_headroom_bytes=10 * GB)


def test_a_refused_change_promises_no_startup_time() -> None:
    """A size refused by the budget carries no expected startup (it showed "startup ~909:04
    expected" for 99,999 GB a rank), while a size that fits on the same host has one."""
    server = ServerFacts(ranks=8, device_pool=KIMI_POOL_EXACT)
    memory = HostMemory(available_bytes=445 * GB)
    history = [StartSample(600, 48)]
    refused = make_plan(ChangeRequest(size_gb=99_999), server, memory, history=history)
    fits = make_plan(ChangeRequest(size_gb=20), server, memory, history=history)
    assert refused.verdict is Verdict.REFUSED
    assert refused.expected_startup_s is None
    assert fits.verdict is Verdict.FITS
    assert fits.expected_startup_s is not None
    assert fits.expected_startup_s > 0
