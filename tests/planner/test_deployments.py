"""The planner on deployments as they are run: a draft pool beside the target's, a pool that
cannot be told, extra host pools, and which rule refused a plan (``refused_by``)."""

from __future__ import annotations

import pytest

from bot.errors import PlanInputError
from bot.planner import (
    GB,
    ChangeRequest,
    DevicePool,
    HostExtra,
    HostMemory,
    ServerFacts,
    Verdict,
    make_plan,
)
from bot.startup import build_report
from bot.vocab import RefusedBy
from tests.startup.conftest import parse_all, read_log

GiB = 1024**3
PLENTY = HostMemory(available_bytes=2000 * GB)


def test_ratio_4_with_a_draft_pool_present_plans_on_the_target_pool() -> None:
    """The speculative-decoding log's target pool is 15.13 GiB (231,120 tokens) and its draft
    pool 0.25 GiB: ratio 4 plans about 4 x 15.13 GiB per rank, never 4 x 0.25."""
    report = build_report(parse_all(read_log("draft_mtp_v0.5.9.log")))
    kv_gib = next(iter(report.kv_gib_per_rank.values()))
    pool = DevicePool.from_log(report.device_tokens, kv_gib)
    server = ServerFacts(ranks=4, device_pool=pool, device_pool_note="a draft pool beside it")
    plan = make_plan(ChangeRequest(ratio=4), server, PLENTY)
    assert plan.per_rank_bytes is not None
    # SGLang's rule on the target: int(231120 x 4) + 1 tokens at 70,272 B (61 MLA bf16 layers).
    sglang = (231120 * 4 + 1) * 70272
    # From the log alone: at most the whole two-decimal interval above, 0.01 / 15.125 GiB.
    assert sglang <= plan.per_rank_bytes <= sglang * (1 + 0.01 / 15.125)
    assert plan.per_rank_bytes / GB == pytest.approx(4 * 15.13 * GiB / GB, rel=1e-3)
    assert plan.ratio_pool is not None
    assert "231,120 tokens, 15.13 GiB" in plan.ratio_pool
    assert "a draft pool beside it" in plan.ratio_pool


def test_ratio_on_an_undecidable_pool_is_refused_with_the_reason() -> None:
    """When the log does not say which pool is the target's, a ratio is refused (missing facts)
    and the reason says why; a size still plans."""
    why = "2 device pools per rank (120,344, 150,430 tokens)"
    server = ServerFacts(
        ranks=4,
        device_pool=DevicePool.from_log(150430, 6.88),
        device_pool_undecided=why,
    )
    plan = make_plan(ChangeRequest(ratio=2), server, PLENTY)
    assert plan.verdict is Verdict.REFUSED
    assert plan.refused_by is RefusedBy.MISSING_FACTS
    assert why in plan.reason
    assert plan.largest_fitting_ratio is None
    size = make_plan(ChangeRequest(size_gb=20), server, PLENTY)
    assert size.verdict is Verdict.FITS
    assert size.refused_by is None


def test_indexer_pool_is_scaled_with_the_kv_host_pool_and_counted_in_the_budget() -> None:
    """The last start logged a 29.02 GB DSA indexer beside a 126.61 GB KV host pool: size 100
    plans the indexer at 100 x 29.02 / 126.61 GB per rank (rounding up), and the budget counts
    both on every rank."""
    extra = HostExtra(name="DSA indexer", logged_gb=29.02, kv_logged_gb=126.61)
    server = ServerFacts(
        ranks=4, device_pool=DevicePool(tokens=1409000, bytes_per_token=44929), host_extras=(extra,)
    )
    plan = make_plan(ChangeRequest(size_gb=100), server, PLENTY)
    assert plan.per_rank_bytes is not None
    indexer = plan.host_extra_bytes_per_rank["DSA indexer"]
    assert plan.per_rank_bytes * 29.02 / 126.61 <= indexer
    assert indexer <= plan.per_rank_bytes * 29.025 / 126.605 + 1
    assert plan.per_rank_total_bytes == plan.per_rank_bytes + indexer
    assert plan.total_bytes == 4 * (plan.per_rank_bytes + indexer)
    assert "DSA indexer" in plan.reason
    assert any("DSA indexer host pool scaled" in note for note in plan.notes)
    assert plan.to_dict()["host_extra_gb_per_rank"]["DSA indexer"] == round(indexer / GB, 3)


def test_a_size_that_fits_without_the_indexer_is_refused_with_it() -> None:
    """4 ranks x 100 GB fits a 460 GB budget; with the indexer's ~23 GB per rank it does not."""
    memory = HostMemory(available_bytes=460 * GB + 10 * GiB + 40 * GB)
    pool = DevicePool(tokens=1409000, bytes_per_token=44929)
    alone = make_plan(ChangeRequest(size_gb=100), ServerFacts(ranks=4, device_pool=pool), memory)
    assert alone.verdict is Verdict.FITS
    extra = HostExtra(name="DSA indexer", logged_gb=29.02, kv_logged_gb=126.61)
    server = ServerFacts(ranks=4, device_pool=pool, host_extras=(extra,))
    plan = make_plan(ChangeRequest(size_gb=100), server, memory)
    assert plan.verdict is Verdict.REFUSED
    assert plan.refused_by is RefusedBy.BUDGET
    # The suggested size fits with its indexer.
    suggested = make_plan(ChangeRequest(size_gb=plan.largest_fitting_size_gb), server, memory)
    assert suggested.verdict is Verdict.FITS


@pytest.mark.parametrize(
    ("request_", "server", "rule"),
    [
        (ChangeRequest(size_gb=44.5), ServerFacts(ranks=8), RefusedBy.SGLANG),
        (ChangeRequest(ratio=-1), ServerFacts(ranks=8), RefusedBy.SGLANG),
        (
            ChangeRequest(ratio=4),
            ServerFacts(ranks=8, device_pool=DevicePool(tokens=159274, bytes_per_token=70272)),
            RefusedBy.BUDGET,
        ),
        (ChangeRequest(ratio=4), ServerFacts(ranks=8), RefusedBy.MISSING_FACTS),
        (
            ChangeRequest(ratio=0.5),
            ServerFacts(ranks=1, device_pool=DevicePool(tokens=159274, bytes_per_token=70272)),
            RefusedBy.SGLANG,
        ),
    ],
)
def test_refused_by_names_the_rule(
    request_: ChangeRequest, server: ServerFacts, rule: RefusedBy
) -> None:
    """Each refusal names its rule: SGLang's own, the budget, or a missing fact."""
    plan = make_plan(request_, server, HostMemory(available_bytes=100 * GB))
    assert plan.verdict is Verdict.REFUSED
    assert plan.refused_by is rule
    assert plan.to_dict()["refused_by"] == rule.value


def test_a_fitting_plan_is_refused_by_nothing() -> None:
    """A plan that fits has no refusing rule."""
    pool = DevicePool(tokens=159274, bytes_per_token=70272)
    plan = make_plan(ChangeRequest(size_gb=48), ServerFacts(ranks=8, device_pool=pool), PLENTY)
    assert plan.fits
    assert plan.refused_by is None
    assert plan.to_dict()["refused_by"] is None


def test_an_extra_pool_beside_no_kv_pool_is_bad_input() -> None:
    """A host extra logged beside a 0 GB KV pool cannot be scaled: a clear PlanInputError."""
    with pytest.raises(PlanInputError, match="cannot be scaled"):
        ServerFacts(ranks=1, host_extras=(HostExtra("DSA indexer", 29.02, 0.0),))
