"""Shared fixtures for the whole suite."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests._examples import FAST_PROFILE

# Registered here, before Hypothesis's plugin loads the profile named on the command line.
settings.register_profile(FAST_PROFILE, max_examples=10)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests marked slow first, each group in its collected order.

    The slow tests (real subprocesses, simulated timings) take seconds to a minute each and the
    rest milliseconds: with xdist handing out tests in collected order, a slow test collected
    last (the wheel install, near the end of the alphabet) starts when the other workers have
    nothing left and the run waits for it alone. Started first, the short tests fill the gaps
    at the end. The sort is stable, so a module's tests stay together within each group.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's SLACK_* or KIMI_* variables; tests pass what they need."""
    for name in list(os.environ):
        if name.startswith(("SLACK_", "KIMI_")):
            monkeypatch.delenv(name, raising=False)
