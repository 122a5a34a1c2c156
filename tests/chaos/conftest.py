"""The chaos suite's fixtures: one whole kimi-ops per test (see ``_rig.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos._rig import ChaosRig, chaos_rig


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ChaosRig]:
    """The agent on the field notes' host serving size 48, the bot as a process, a cuttable link
    between them, the Slack stand-in and the store; everything stopped afterwards."""
    with chaos_rig(tmp_path) as running:
        yield running
