"""The startup guard when the agent runs out of file descriptors: it samples on, never trips
on it, and says so once a minute rather than at every sample."""

from __future__ import annotations

import errno
import logging

import pytest

from bot.agent.config import DEFAULT_GUARD_FLOOR_GB, GuardSettings
from bot.agent.engine.guard import StartGuard
from bot.agent.engine.watcher import StartFigures
from bot.agent.host.probe import RamFacts
from bot.errors import RamProbeError


class StarvedProbe:
    """A probe whose every RAM read fails as psutil's does with a full descriptor table."""

    def __init__(self) -> None:
        self.reads = 0

    def ram(self) -> RamFacts:
        self.reads += 1
        error = RamProbeError("psutil could not read host memory: [Errno 24] Too many open files")
        error.__cause__ = OSError(errno.EMFILE, "Too many open files")
        raise error


def test_a_guard_out_of_descriptors_retries_and_logs_it_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """50 s of samples every 0.5 s, each failing with EMFILE: no trip, 100 reads, and one
    warning naming the descriptors. Failed before the fix: a warning at every sample."""
    probe = StarvedProbe()
    settings = GuardSettings(enabled=True, interval_s=0.5, floor_gb=DEFAULT_GUARD_FLOOR_GB)
    guard = StartGuard(settings, probe, None, 8)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="bot.agent.engine.guard"):
        trips = [guard.check(StartFigures(), step * 0.5) for step in range(100)]
    assert trips == [None] * 100
    assert probe.reads == 100
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1
    assert "out of file descriptors" in warnings[0]
