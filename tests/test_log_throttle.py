"""Tests for the rate-limited warnings (``bot.log_throttle``)."""

from __future__ import annotations

import logging

import pytest

from bot.log_throttle import LogThrottle


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_repeats_are_counted_and_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    """10,000 repeats in a minute give one line, and the next line counts the ones left out."""
    clock = _Clock()
    throttle = LogThrottle(logging.getLogger("throttled"), interval_s=60, monotonic=clock)
    with caplog.at_level(logging.WARNING, logger="throttled"):
        logged = [throttle.warning("accept", "cannot accept: %s", "EMFILE") for _ in range(10000)]
        clock.now += 60
        throttle.warning("accept", "cannot accept: %s", "EMFILE")
        throttle.warning("other", "another kind")
    assert logged.count(True) == 1
    assert [record.getMessage() for record in caplog.records] == [
        "cannot accept: EMFILE",
        "cannot accept: EMFILE (9,999 more like it in the last 60 s)",
        "another kind",
    ]
