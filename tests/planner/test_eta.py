"""Expected startup time from a host's earlier starts."""

from __future__ import annotations

import pytest

from bot.planner import DEFAULT_PIN_SECONDS_PER_GB, StartSample, estimate_startup_seconds


def test_no_history_gives_no_estimate() -> None:
    """A host never started by kimi-ops has no expected time, rather than a made-up one."""
    assert estimate_startup_seconds([], 48) is None


def test_one_size_of_history_scales_with_the_default_pin_rate() -> None:
    """Starts at 48 GB/rank taking 600 s predict 600 + (96 - 48) x the default rate at 96 GB."""
    history = [StartSample(590, 48), StartSample(600, 48), StartSample(610, 48)]
    assert estimate_startup_seconds(history, 96) == pytest.approx(
        600 + 48 * DEFAULT_PIN_SECONDS_PER_GB
    )


def test_two_sizes_fit_the_hosts_own_pin_rate() -> None:
    """Starts of 600 s at 0 GB and 720 s at 240 GB give 0.5 s/GB: 660 s at 120 GB."""
    history = [StartSample(600, 0), StartSample(720, 240)]
    assert estimate_startup_seconds(history, 120) == pytest.approx(660)


def test_a_negative_fitted_rate_falls_back_to_the_default() -> None:
    """Noise that makes bigger pools look faster does not predict a faster start."""
    history = [StartSample(700, 0), StartSample(600, 100)]
    estimate = estimate_startup_seconds(history, 200)
    assert estimate is not None
    assert estimate > estimate_startup_seconds(history, 0)  # type: ignore[operator]


def test_near_identical_sizes_do_not_fit_a_slope_to_noise() -> None:
    """660 s at 44.77 GB and 600 s at 44.74 GB (noise, not a pin rate) predict about ten
    minutes at 48 GB, not a day: 630 s median fixed cost + 48 x 60/110 s, roughly."""
    estimate = estimate_startup_seconds([StartSample(660, 44.77), StartSample(600, 44.74)], 48)
    assert estimate is not None
    assert 600 < estimate < 700
