"""The chaos suite's fixtures: one whole kimi-ops per test (see ``_rig.py``), and the agent-side
rig of one simulated host (see ``_agent_rig.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.chaos._agent_rig import RATIO_2, AgentRig
from tests.chaos._agent_setup import build_agent_rig
from tests.chaos._rig import ChaosRig, chaos_rig


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ChaosRig]:
    """The agent on the field notes' host serving size 48, the bot as a process, a cuttable link
    between them, the Slack stand-in and the store; everything stopped afterwards."""
    with chaos_rig(tmp_path) as running:
        yield running


@pytest.fixture
def agent_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., AgentRig]]:
    """Build the test's rig: ``backend`` ("process" or "systemd"), the simulator's ``flags``
    and extra ``sim_env``, [agent] overrides as keywords. Afterwards every agent is killed, the
    server stopped and every simulator of the test killed."""
    made: list[AgentRig] = []

    def build(
        backend: str = "process",
        flags: Sequence[str] = RATIO_2,
        sim_env: Mapping[str, str] | None = None,
        **agent: Any,
    ) -> AgentRig:
        assert not made, "one rig per test: they would share the simulated host"
        rig = build_agent_rig(tmp_path, monkeypatch, backend, flags, sim_env, **agent)
        made.append(rig)
        return rig

    yield build
    for rig in made:
        rig.close()
