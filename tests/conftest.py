"""Shared fixtures for the whole suite."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's SLACK_* or KIMI_* variables; tests pass what they need."""
    for name in list(os.environ):
        if name.startswith(("SLACK_", "KIMI_")):
            monkeypatch.delenv(name, raising=False)
