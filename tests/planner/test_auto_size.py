"""Tests for SGLang 0.5.23's HiCache auto-sizing as the planner applies it.

Expected ratios are SGLang's rule (``mem_cache/hicache_auto_size.py``, ``pool_host/base.py``)
written out here: ``budget = int(((headroom - 10 GiB) // ranks) x 0.8)``, ``ratio = min(2,
budget x 0.95 / device bytes)``, the least over the ranks.
"""

from __future__ import annotations

import pytest

from bot.errors import PlanInputError
from bot.planner import (
    GB,
    AutoSize,
    ChangeRequest,
    DevicePool,
    HostMemory,
    HostPoolFlags,
    ServerFacts,
    SGLangVersion,
    auto_size,
    make_plan,
    per_rank_budget_bytes,
    start_headroom_bytes,
)
from bot.vocab import RefusedBy

GIB = 1024**3
V0523 = SGLangVersion.parse("0.5.23")
V059 = SGLangVersion.parse("0.5.9")
SMALL_BYTES = 35_136  # small-2gpu's MLA bytes per token


def by_hand(headroom: int, device: list[int], ranks: int) -> float:
    budget = int(((headroom - 10 * GIB) // ranks) * 0.8)
    return min(min(2.0, budget * 0.95 / d) for d in device)


def test_a_tight_host_lowers_the_ratio_as_sglang_does() -> None:
    """40 GiB free, 2 ranks, 10 GiB of device pool each: the ratio drops from 2 to 1.14."""
    got = auto_size(40 * GIB, [10 * GIB, 10 * GIB], 2)
    assert isinstance(got, AutoSize)
    assert got.ratio == by_hand(40 * GIB, [10 * GIB, 10 * GIB], 2)
    assert got.ratio == pytest.approx(1.14)
    assert got.budget_bytes == int(15 * GIB * 0.8)
    assert got.lowered


def test_a_roomy_host_keeps_the_default_ratio() -> None:
    """With room for more than twice the device pool, SGLang keeps 2.0 (the minimum caps it)."""
    got = auto_size(400 * GIB, [10 * GIB], 1)
    assert isinstance(got, AutoSize)
    assert got.ratio == 2.0
    assert not got.lowered


def test_the_rank_with_the_largest_pool_sets_every_rank_s_ratio() -> None:
    """PP stages own different layers: the least ratio over the ranks is the one all take."""
    device = [6 * GIB, 9 * GIB, 7 * GIB, 6 * GIB]
    got = auto_size(70 * GIB, device, 4)
    assert isinstance(got, AutoSize)
    assert got.ratio == by_hand(70 * GIB, device, 4)
    assert got.ratio == pytest.approx(int(15 * GIB * 0.8) * 0.95 / (9 * GIB))
    assert got.device_bytes == 9 * GIB


def test_the_per_rank_budget_floors_the_division_as_sglang_s_integer_division() -> None:
    """(headroom - 10 GiB) // ranks, in whole bytes: 3 ranks of an odd headroom lose the
    remainder."""
    headroom = 10 * GIB + 100
    assert per_rank_budget_bytes(headroom, 3) == 33
    assert per_rank_budget_bytes(headroom + 0.9, 3) == 33


def test_no_memory_left_after_the_reserve_is_sglang_s_refusal_to_start() -> None:
    """A headroom under the 10 GiB reserve leaves a ratio <= 0: SGLang raises; so do we, named."""
    got = auto_size(9 * GIB, [GIB], 1)
    assert isinstance(got, str)
    assert "10 GiB reserve" in got
    assert "refuses to start" in got


def test_the_cgroup_bounds_the_headroom_the_start_sees() -> None:
    """64 GB available and 20 GB released, in a cgroup limited to 48 GiB: the start sees 48 GiB."""
    memory = HostMemory(
        available_bytes=64 * GB, server_held_bytes=20 * GB, cgroup_limit_bytes=48 * GIB
    )
    assert start_headroom_bytes(memory) == 48 * GIB
    assert start_headroom_bytes(HostMemory(available_bytes=64 * GB, server_held_bytes=GB)) == (
        65 * GB
    )


def test_bad_inputs_are_refused_by_name() -> None:
    """No ranks, an empty pool, a fraction outside (0, 1]: each a specific error."""
    with pytest.raises(PlanInputError, match="ranks per host"):
        auto_size(40 * GIB, [GIB], 0)
    with pytest.raises(PlanInputError, match="device pool bytes"):
        auto_size(40 * GIB, [0], 1)
    with pytest.raises(PlanInputError, match="fraction"):
        auto_size(40 * GIB, [GIB], 1, fraction=1.5)
    with pytest.raises(PlanInputError, match="not both"):
        ChangeRequest(auto=True, size_gb=4)


def small_server(**kw: object) -> ServerFacts:
    pool = DevicePool(tokens=150_000, bytes_per_token=SMALL_BYTES)
    return ServerFacts(ranks=2, device_pool=pool, version=V0523, sized_by_sglang=True, **kw)  # type: ignore[arg-type]


def test_auto_is_planned_on_the_ratio_sglang_will_pick_in_a_cgroup() -> None:
    """small-2gpu in a 24 GiB cgroup: the plan's ratio is SGLang's, from the cgroup's headroom,
    the host pool is that ratio's, and the plan reads "auto: ratio 1.08 (SGLang sizes it at
    start)"."""
    memory = HostMemory(available_bytes=60 * GB, cgroup_limit_bytes=24 * GIB)
    plan = make_plan(ChangeRequest(auto=True), small_server(), memory, headroom_gb=0)
    device = (150_000 + 1) * SMALL_BYTES
    ratio = by_hand(24 * GIB, [device, device], 2)
    assert ratio == pytest.approx(1.0838, abs=1e-4)  # 5.6 GiB x 0.95 / 4.91 GiB
    assert plan.auto_size is not None
    assert plan.auto_size.ratio == ratio
    assert plan.request == ChangeRequest(auto=True)  # as asked: the command writes no ratio
    assert plan.setting == "auto: ratio 1.08 (SGLang sizes it at start)"
    assert plan.per_rank_tokens == int(150_000 * ratio) + 1
    assert plan.reason.startswith("auto: ratio 1.08 (SGLang sizes it at start) needs 2 ranks")
    assert plan.to_dict()["mode"] == "auto"
    assert plan.to_dict()["request"] == {"ratio": None, "size_gb": None, "auto": True}
    assert plan.to_dict()["setting"] == plan.setting
    assert any(note.startswith("SGLang auto-sizes HiCache at start") for note in plan.notes)


def test_auto_counts_what_the_stopped_server_releases() -> None:
    """20 GB available plus 20 GB the restart frees: SGLang starts with 40 GB, so the ratio is
    computed on 40 GB, not on 20."""
    memory = HostMemory(available_bytes=20 * GB, server_held_bytes=20 * GB)
    plan = make_plan(ChangeRequest(auto=True), small_server(), memory, headroom_gb=0)
    device = (150_000 + 1) * SMALL_BYTES
    assert plan.auto_size is not None
    assert plan.auto_size.ratio == by_hand(40 * GB, [device, device], 2)


def test_an_explicit_ratio_on_an_auto_sized_server_says_it_turns_auto_sizing_off() -> None:
    """ratio 1.5 and size 4 on a 0.5.23 server without either flag: each plan warns that the
    flag it writes turns SGLang's auto-sizing off."""
    memory = HostMemory(available_bytes=60 * GB)
    for request, flag in ((ChangeRequest(ratio=1.5), "--hicache-ratio"),
                          (ChangeRequest(size_gb=4), "--hicache-size")):  # fmt: skip
        plan = make_plan(request, small_server(), memory, headroom_gb=0)
        assert any(
            f"writes {flag}, which turns SGLang's auto-sizing off" in w for w in plan.warnings
        ), plan.warnings


def test_no_auto_sizing_warning_where_there_is_none_to_turn_off() -> None:
    """A 0.5.9 server, or a 0.5.23 server already sized by a flag: no such warning."""
    memory = HostMemory(available_bytes=60 * GB)
    pool = DevicePool(tokens=150_000, bytes_per_token=SMALL_BYTES)
    for server in (
        ServerFacts(ranks=2, device_pool=pool, version=V059, sized_by_sglang=True),
        ServerFacts(ranks=2, device_pool=pool, version=V0523, sized_by_sglang=False),
    ):
        plan = make_plan(ChangeRequest(ratio=1.5), server, memory, headroom_gb=0)
        assert not any("auto-sizing" in w for w in plan.warnings)


def test_auto_on_a_version_without_auto_sizing_is_planned_on_its_default_ratio() -> None:
    """SGLang 0.5.9 has no auto-sizing: neither flag is its default ratio 2, planned so, with a
    warning saying it, and the setting reads "auto: ratio 2 (SGLang 0.5.9's default)"."""
    pool = DevicePool(tokens=150_000, bytes_per_token=SMALL_BYTES)
    server = ServerFacts(ranks=2, device_pool=pool, version=V059)
    plan = make_plan(ChangeRequest(auto=True), server, HostMemory(available_bytes=60 * GB))
    assert plan.auto_size is None
    assert plan.per_rank_tokens == 300_001
    assert plan.setting == "auto: ratio 2 (SGLang 0.5.9's default)"
    assert any("SGLang 0.5.9 has no HiCache auto-sizing" in w for w in plan.warnings)


def test_auto_with_no_memory_after_the_reserve_is_refused_as_sglang_would() -> None:
    """8 GiB in the cgroup: SGLang's auto-sizing has nothing after its reserve and will not
    start; the plan says so."""
    memory = HostMemory(available_bytes=60 * GB, cgroup_limit_bytes=8 * GIB)
    plan = make_plan(ChangeRequest(auto=True), small_server(), memory, headroom_gb=0)
    assert plan.refused_by is RefusedBy.SGLANG
    assert "refuses to start" in plan.reason


def test_auto_without_a_device_pool_is_refused_for_the_missing_pool() -> None:
    """Nothing gives the device pool (no start, no model files): auto cannot be sized, and the
    refusal says the pool is unknown, as for a ratio."""
    server = ServerFacts(ranks=2, version=V0523, sized_by_sglang=True)
    plan = make_plan(ChangeRequest(auto=True), server, HostMemory(available_bytes=60 * GB))
    assert plan.refused_by is RefusedBy.MISSING_FACTS
    assert "needs the device pool's size, which is unknown" in plan.reason


def test_buffer_only_auto_sizes_down_from_its_own_default_of_1_2() -> None:
    """A buffer_only server left to auto-sizing starts from 1.2, not 2 (SGLang's hicache hook
    sets the unset ratio to 1.2 before auto-sizing lowers it): with room to spare the plan is
    ratio 1.2, and on a tight host the lowered ratio is the same as from 2."""
    pool = DevicePool(tokens=100_000, bytes_per_token=SMALL_BYTES)
    flags = HostPoolFlags(host_memory_mode="buffer_only", storage_backend="file")
    server = ServerFacts(ranks=1, device_pool=pool, version=V0523, host_pool_flags=flags)
    roomy = make_plan(ChangeRequest(auto=True), server, HostMemory(available_bytes=400 * GIB))
    assert roomy.auto_size is not None
    assert roomy.auto_size.ratio == 1.2
    device = (100_000 + 1) * SMALL_BYTES
    tight_headroom = 10 * GIB + int(device * 0.5 / 0.8 / 0.95) + 1
    tight = make_plan(ChangeRequest(auto=True), server, HostMemory(available_bytes=tight_headroom))
    assert tight.auto_size is not None
    assert tight.auto_size.ratio == pytest.approx(by_hand(tight_headroom, [device], 1), rel=1e-9)
    assert tight.auto_size.ratio < 1.2
