"""Properties of the planner that must hold for any input (hypothesis)."""

from __future__ import annotations

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
from tests._examples import examples

sizes = st.integers(min_value=1, max_value=2000)
ratios = st.floats(min_value=0.05, max_value=64, allow_nan=False, allow_infinity=False)
ranks = st.integers(min_value=1, max_value=64)
pages = st.sampled_from([1, 16, 32, 64, 128])
bytes_per_token = st.integers(min_value=1_000, max_value=2_000_000)
device_tokens = st.integers(min_value=1_000, max_value=3_000_000)
available = st.floats(min_value=0, max_value=4_000, allow_nan=False)
held = st.floats(min_value=0, max_value=1_000, allow_nan=False)


@settings(max_examples=examples(300), deadline=None)
@given(sizes, ranks, pages, bytes_per_token, device_tokens, available, held)
def test_size_plans_never_fall_below_the_request_and_respect_the_budget(
    size: int, n_ranks: int, page: int, bpt: int, tokens: int, avail: float, held_gb: float
) -> None:
    """Per-rank bytes >= size x 1e9, total = per-rank x ranks, fits <=> total within budget."""
    plan = make_plan(
        ChangeRequest(size_gb=size),
        ServerFacts(
            ranks=n_ranks,
            device_pool=DevicePool(tokens=tokens, bytes_per_token=bpt),
            page_size=page,
        ),
        HostMemory(avail * GB, server_held_bytes=held_gb * GB),
    )
    assert plan.per_rank_bytes is not None
    assert plan.total_bytes is not None
    assert plan.per_rank_bytes >= size * GB
    assert plan.per_rank_tokens is not None
    assert plan.per_rank_tokens % page == 0
    assert plan.total_bytes == plan.per_rank_bytes * n_ranks
    if plan.verdict is Verdict.FITS:
        assert plan.total_bytes <= plan.budget_bytes
    else:
        # Refused either for the budget or, on SGLang <= 0.5.12, for a host pool not larger than
        # the device pool.
        assert plan.total_bytes > plan.budget_bytes or "not larger than" in plan.reason


@settings(max_examples=examples(300), deadline=None)
@given(ratios, ranks, pages, bytes_per_token, device_tokens, available, held)
def test_ratio_plans_fit_only_within_budget(
    ratio: float, n_ranks: int, page: int, bpt: int, tokens: int, avail: float, held_gb: float
) -> None:
    """A ratio plan that fits never exceeds the budget; its pool is at least ratio x device."""
    plan = make_plan(
        ChangeRequest(ratio=ratio),
        ServerFacts(
            ranks=n_ranks,
            device_pool=DevicePool(tokens=tokens, bytes_per_token=bpt),
            page_size=page,
        ),
        HostMemory(avail * GB, server_held_bytes=held_gb * GB),
    )
    assert plan.per_rank_tokens is not None
    assert plan.per_rank_tokens > int(tokens * ratio) - 1
    assert plan.total_bytes is not None
    if plan.verdict is Verdict.FITS:
        assert plan.total_bytes <= plan.budget_bytes
        assert plan.headroom_left_bytes is not None
        assert plan.headroom_left_bytes >= 0


@settings(max_examples=examples(300), deadline=None)
@given(ranks, bytes_per_token, available, st.sampled_from(["0.5.9", "0.5.12", "0.5.23"]))
def test_the_suggested_largest_size_fits_and_one_more_does_not(
    n_ranks: int, bpt: int, avail: float, version: str
) -> None:
    """The size a refusal suggests fits (on SGLang <= 0.5.12 too, where the host pool must be
    larger than the device pool); one GB more per rank does not."""
    pool = DevicePool(tokens=100_000, bytes_per_token=bpt)
    facts = ServerFacts(ranks=n_ranks, device_pool=pool, version=SGLangVersion.parse(version))
    memory = HostMemory(avail * GB)
    largest = make_plan(ChangeRequest(size_gb=10_000), facts, memory).largest_fitting_size_gb
    assert largest is not None
    if largest > 0:
        assert make_plan(ChangeRequest(size_gb=largest), facts, memory).fits
    assert not make_plan(ChangeRequest(size_gb=largest + 1), facts, memory).fits


@settings(max_examples=examples(300), deadline=None)
@given(ranks, bytes_per_token, available, st.sampled_from(["0.5.9", "0.5.12", "0.5.23"]))
def test_the_suggested_largest_ratio_fits(
    n_ranks: int, bpt: int, avail: float, version: str
) -> None:
    """The ratio a refusal suggests is one the planner accepts, in both eras."""
    pool = DevicePool(tokens=100_000, bytes_per_token=bpt)
    facts = ServerFacts(ranks=n_ranks, device_pool=pool, version=SGLangVersion.parse(version))
    memory = HostMemory(avail * GB)
    largest = make_plan(ChangeRequest(ratio=1_000), facts, memory).largest_fitting_ratio
    if largest:
        assert make_plan(ChangeRequest(ratio=largest), facts, memory).fits
