"""Composing the agent from its settings."""

from __future__ import annotations

import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from bot.agent.config import AgentSettings
from bot.agent.service import build_service
from bot.agent.tokens import TokenSet
from bot.errors import KimiOpsError
from bot.settings import Secret


def test_an_unusable_state_dir_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    """A state_dir that is a regular file fails with an error of the tree (which `kimi-ops
    agent` prints in one line), naming the path."""
    not_a_dir = tmp_path / "state"
    not_a_dir.write_text("a file, not a folder")
    settings = AgentSettings(
        tokens=TokenSet.single(Secret("t")),
        command=(sys.executable, "-m", "bot.sim", "--model-path", "m"),
        state_dir=not_a_dir,
        log_file=tmp_path / "server.log",
        probe="sim",
        sim_profile="small-2gpu",
        sim_state_dir=tmp_path / "sim",
        env=MappingProxyType({}),
    )
    with pytest.raises(KimiOpsError, match="state"):
        build_service(settings)
