"""Recommendations: what the samples call for (pure), and what the planner then accepts on a
real agent driving the simulated field-notes host (449 GB RAM, TP 8, serving ratio 2)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from bot.chat.agent_client import AgentClient
from bot.chat.reporting import Advice
from bot.hicache import HiCacheSetting
from bot.reports import RecommendRules
from bot.reports.recommend import RATIO_LADDER, Candidate, Need, assess, candidates
from bot.reports.runtime import ServerMetricsSource, advise, collect_reports
from bot.store import CapacitySample
from tests.chat.conftest import KIMI, RunningAgent
from tests.reports._fixtures import T0, SetClock, series

RULES = RecommendRules()
NOW = T0 + timedelta(hours=2)
RATIO_2 = HiCacheSetting(enabled=True, ratio=2.0)


def test_sustained_high_usage_with_a_queue_calls_for_growth() -> None:
    """Usage >= 90% in every sample of the last 30 min with 80 queued: grow."""
    found = assess(series("kimi-01", NOW, 7, usage=0.97, queued=80), NOW, RULES)
    assert found is not None
    assert found.need is Need.GROW
    assert "97%-97%" in found.evidence
    assert "80 requests queued" in found.evidence


def test_one_dip_below_the_threshold_is_not_sustained() -> None:
    """A single sample at 80% in the window: not sustained, nothing."""
    samples = series("kimi-01", NOW, 7, usage=0.97, queued=80)
    samples[3] = dataclasses.replace(samples[3], token_usage=0.80)
    assert assess(samples, NOW, RULES) is None


def test_high_usage_without_a_queue_calls_for_nothing() -> None:
    """Busy but nobody waiting: nothing."""
    assert assess(series("kimi-01", NOW, 7, usage=0.97, queued=0), NOW, RULES) is None


def test_an_idle_host_calls_for_nothing() -> None:
    """Low usage, no queue, plenty of RAM: nothing."""
    assert assess(series("kimi-01", NOW, 24, usage=0.05, queued=0), NOW, RULES) is None


def test_an_unused_host_pool_while_ram_is_tight_calls_for_shrinking() -> None:
    """Usage never above 30% while only 8% of RAM is available: shrink."""
    samples = series("kimi-01", NOW, 24, usage=0.12, queued=0, available_gb=36.0)
    found = assess(samples, NOW, RULES)
    assert found is not None
    assert found.need is Need.SHRINK
    assert f"{36 / 449:.0%}" in found.evidence


def test_too_few_samples_or_no_metrics_call_for_nothing() -> None:
    """Two samples, or samples without /metrics figures, are no evidence."""
    assert assess(series("kimi-01", NOW, 2, usage=0.97, queued=80), NOW, RULES) is None
    assert assess(series("kimi-01", NOW, 7, usage=None, queued=None), NOW, RULES) is None


def test_growth_candidates_are_the_larger_ratios_largest_first() -> None:
    """From ratio 2: every ladder ratio above 2, from the largest down."""
    found = candidates(RATIO_2, Need.GROW)
    assert [c.ratio for c in found] == sorted((r for r in RATIO_LADDER if r > 2), reverse=True)
    assert found[-1].command == "resize ratio 3"


def test_shrink_candidates_start_near_half_and_stay_below() -> None:
    """From ratio 8: 4 first (half), then the smaller, then those between half and 8."""
    found = [c.ratio for c in candidates(HiCacheSetting(enabled=True, ratio=8.0), Need.SHRINK)]
    assert found[0] == 4
    assert all(r < 8 for r in found)


def test_a_size_grows_and_shrinks_in_whole_gb() -> None:
    """A size setting is changed as a size (SGLang takes whole GB per rank)."""
    size = HiCacheSetting(enabled=True, ratio=2.0, size_gb=48)
    assert candidates(size, Need.GROW)[0] == Candidate(size_gb=192)
    assert [c.size_gb for c in candidates(size, Need.SHRINK)] == [24, 36]


def test_hicache_off_gets_no_candidates() -> None:
    """Without HiCache there is no host pool to resize."""
    assert candidates(HiCacheSetting(enabled=False), Need.GROW) == ()


# -- checked by the planner, on a real agent ---------------------------------------------------


def _client(agent: RunningAgent) -> AgentClient:
    return AgentClient(agent.url, agent.token, host="kimi-01")


def _advise(agent: RunningAgent, samples: list[CapacitySample]) -> Advice | None:
    with _client(agent) as client:
        report = collect_reports(
            ["kimi-01"], {"kimi-01": client}, ServerMetricsSource({}), SetClock(NOW)
        )[0]
        assert report.answered, report.problem
        return advise(report, samples, client, RULES, NOW)


@pytest.mark.slow
def test_a_queue_at_high_usage_with_ram_to_spare_gets_the_largest_ratio_that_fits(
    kimi: RunningAgent,
) -> None:
    """The advice is a plan the planner accepts with the margin left, and the next ratio up the
    ladder is one the planner refuses (or leaves less than the margin)."""
    advice = _advise(kimi, series("kimi-01", NOW, 7, usage=0.97, queued=80))
    assert advice is not None
    plan = advice.change.plan
    assert plan.fits, plan.reason
    assert plan.headroom_left_gb is not None
    assert plan.headroom_left_gb >= RULES.margin_gb
    assert plan.ratio is not None
    assert plan.ratio > 2
    assert advice.command == f"resize ratio {plan.ratio:g}"
    larger = [r for r in RATIO_LADDER if r > plan.ratio]
    with _client(kimi) as client:
        for ratio in larger[:1]:
            above = client.plan(ratio=ratio).plan
            assert not above.fits or (above.headroom_left_gb or 0) < RULES.margin_gb


@pytest.mark.slow
def test_an_idle_host_gets_no_advice(kimi: RunningAgent) -> None:
    """Idle samples on a live host: no advice."""
    assert _advise(kimi, series("kimi-01", NOW, 24, usage=0.05, queued=0)) is None


@pytest.fixture
def ram_eater(kimi: RunningAgent) -> Iterator[None]:
    """Another process on the simulated host holding 200 GB of its RAM (``bot.sim.stray``)."""
    sim_state = str(kimi.root / "sim-host")
    env = {**os.environ, "KIMI_SIM_PROFILE": KIMI, "KIMI_SIM_STATE_DIR": sim_state}
    stray = subprocess.Popen(
        [sys.executable, "-m", "bot.sim.stray", "--ram-gb", "200"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert stray.stdout is not None
        assert "holds" in stray.stdout.readline().decode()
        yield
    finally:
        stray.terminate()
        stray.wait(timeout=10)
        if stray.stdout is not None:
            stray.stdout.close()
        time.sleep(0.6)  # the stray leaves the host's state within one update


@pytest.mark.slow
@pytest.mark.usefixtures("ram_eater")
def test_tight_ram_gets_no_growth_the_planner_would_refuse(kimi: RunningAgent) -> None:
    """With 200 GB eaten, a queue at high usage gets no advice: the planner refuses even the
    smallest larger ratio (3), so nothing is recommended."""
    with _client(kimi) as client:
        assert not client.plan(ratio=3).plan.fits
    assert _advise(kimi, series("kimi-01", NOW, 7, usage=0.97, queued=80)) is None


@pytest.mark.slow
@pytest.mark.usefixtures("ram_eater")
def test_an_unused_host_pool_on_tight_ram_gets_a_smaller_ratio_that_fits(
    kimi: RunningAgent,
) -> None:
    """Low usage while RAM is short: a ratio below 2 that the planner accepts."""
    samples = series("kimi-01", NOW, 24, usage=0.1, queued=0, available_gb=37.9)
    advice = _advise(kimi, samples)
    assert advice is not None
    assert advice.change.plan.fits, advice.change.plan.reason
    assert advice.change.plan.ratio is not None
    assert advice.change.plan.ratio < 2
