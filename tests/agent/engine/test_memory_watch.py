"""The post-ready watch's decision (pure): scripted headroom samples in, crossings out."""

from __future__ import annotations

import pytest

from bot.agent.engine.memory_watch import (
    HeadroomCrossings,
    HeadroomSample,
    crossing_sentence,
    headroom_of,
)
from bot.agent.host.probe import RamFacts

FLOOR = 10 * 1024**3  # the guard's default floor: SGLang's 10 GiB reserve
GB = 1e9


def sample(headroom_gb: float, at: str = "t") -> HeadroomSample:
    n = round(headroom_gb * GB)
    return HeadroomSample(at=at, headroom_bytes=n, available_bytes=n)


def crossings_of(crossings: HeadroomCrossings, script: list[float]) -> list[str]:
    """The ``at`` of every sample that raised a crossing."""
    out = []
    for i, value in enumerate(script):
        crossing = crossings.observe(sample(value, at=str(i)))
        if crossing is not None:
            out.append(crossing.sample.at)
    return out


def test_a_headroom_hovering_at_the_floor_raises_one_crossing() -> None:
    """Samples that dip under the floor and come back within the margin, again and again, are
    one crossing: the first dip."""
    crossings = HeadroomCrossings(FLOOR, margin_bytes=1 * GB)
    script = [20, 12, 10.7, 10.8, 10.6, 11.5, 10.0, 11.6, 9.0]  # never above 11.74 after 10.7
    assert crossings_of(crossings, script) == ["2"]
    assert crossings.below


def test_back_above_floor_plus_margin_rearms_for_a_second_crossing() -> None:
    """Under, back above floor + margin, under again: exactly two crossings, at the two falls."""
    crossings = HeadroomCrossings(FLOOR, margin_bytes=1 * GB)
    script = [30, 8, 7, 11.74, 9, 8, 5]
    # 11.74 GB is 10.737 + 1.0 = 11.737 GB or more: re-armed; 9 is the second crossing.
    assert crossings_of(crossings, script) == ["1", "4"]
    crossings = HeadroomCrossings(FLOOR, margin_bytes=1 * GB)
    assert crossings_of(crossings, [30, 8, 11.7, 9, 25, 5]) == ["1", "5"]


def test_a_headroom_exactly_at_the_floor_is_not_under_it() -> None:
    """The floor itself is allowed (as the guard allows it); one byte less is a crossing."""
    crossings = HeadroomCrossings(FLOOR, margin_bytes=0)
    at_floor = HeadroomSample("a", FLOOR, FLOOR)
    assert crossings.observe(at_floor) is None
    crossing = crossings.observe(HeadroomSample("b", FLOOR - 1, FLOOR - 1))
    assert crossing is not None
    assert crossing.shortfall_bytes == 1
    assert crossings.observe(at_floor) is None  # margin 0: back at the floor re-arms
    assert crossings.observe(HeadroomSample("c", FLOOR - 1, FLOOR - 1)) is not None


def test_a_negative_floor_or_margin_is_refused() -> None:
    """A floor or margin below zero is a programming error, named with its value."""
    with pytest.raises(ValueError, match="-1"):
        HeadroomCrossings(-1)
    with pytest.raises(ValueError, match="-5"):
        HeadroomCrossings(FLOOR, margin_bytes=-5)


def test_the_headroom_is_the_least_of_host_and_cgroup_room() -> None:
    """Without a cgroup limit the headroom is available RAM; under one, the room under the
    limit when that is less, and the sample says which bounds it."""
    host = headroom_of(RamFacts(total_bytes=100, available_bytes=60))
    assert (host.headroom_bytes, host.where) == (60, "host")
    capped = headroom_of(RamFacts(100, 60, cgroup_limit_bytes=50, cgroup_used_bytes=30))
    assert (capped.headroom_bytes, capped.where, capped.cgroup_limit_bytes) == (20, "cgroup", 50)
    roomy = headroom_of(RamFacts(100, 60, cgroup_limit_bytes=500, cgroup_used_bytes=30))
    assert (roomy.headroom_bytes, roomy.where) == (60, "host")


def test_the_sentence_gives_the_figures_and_says_nothing_was_restarted() -> None:
    """The notice names the headroom, the floor, the shortfall and the cgroup's limit when the
    cgroup bounds it, and says the server was left running."""
    crossings = HeadroomCrossings(FLOOR)
    host = crossings.observe(sample(8.2))
    assert host is not None
    text = crossing_sentence(host)
    assert "host RAM available fell to 8.2 GB" in text
    assert "floor of 10.7 GB (2.5 GB short)" in text
    assert "nothing was restarted" in text
    cgroup = HeadroomCrossings(FLOOR).observe(
        HeadroomSample("t", int(3e9), int(40e9), cgroup_limit_bytes=int(14e9))
    )
    assert cgroup is not None
    assert "cgroup has 3.0 GB left under its 14.0 GB limit" in crossing_sentence(cgroup)
