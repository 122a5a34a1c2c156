"""Shared fixtures for the whole suite."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests._examples import FAST_PROFILE

# Registered here, before Hypothesis's plugin loads the profile named on the command line.
settings.register_profile(FAST_PROFILE, max_examples=10)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's SLACK_* or KIMI_* variables; tests pass what they need."""
    for name in list(os.environ):
        if name.startswith(("SLACK_", "KIMI_")):
            monkeypatch.delenv(name, raising=False)
