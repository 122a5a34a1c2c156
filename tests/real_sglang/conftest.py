"""Fixtures for the tests against a real SGLang 0.5.23 on CPU, run by ``make test-real``.

They need the side virtualenv ``setup_side_venv.sh`` builds; without it they fail saying so. The
real server takes 20 s to several minutes per start on a busy 2-core machine, so one direct start
is shared by the session (the conformance and report tests read its log) and the agent's tests
share one agent and server per module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from tests.real_sglang._launch import Run, run_to_ready
from tests.real_sglang._side import SERVER_ENV, SideVenv, free_port, locate_side_venv, server_argv

# A real start on a loaded machine has been seen to take 150 s; this only bounds a hang.
START_TIMEOUT_S = 600


def clean_environ() -> dict[str, str]:
    """This process's environment without SLACK_* and KIMI_* (as the suite's autouse fixture
    does for each test; module and session fixtures run before it)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "KIMI_"))}


def server_environ(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with what the real server needs on CPU; its PYTHONPATH is the stand-ins only."""
    return {**base, **SERVER_ENV}


@dataclass(frozen=True)
class RealStart:
    """The real server started directly with ``flags`` (its own arguments), ready, stopped."""

    flags: list[str]
    run: Run


@pytest.fixture(scope="session")
def side() -> SideVenv:
    """The side virtualenv and the tiny model; fails (never skips) when they are not built."""
    try:
        return locate_side_venv(os.environ)
    except AssertionError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def real_start(side: SideVenv, tmp_path_factory: pytest.TempPathFactory) -> RealStart:
    """One real start at ``--hicache-size 1``, to ready, then SIGTERM; its whole log kept."""
    argv = server_argv(
        side.python, side.model, free_port(), "--enable-hierarchical-cache", "--hicache-size", "1"
    )
    log_file = tmp_path_factory.mktemp("real") / "server.log"
    run = run_to_ready(argv, server_environ(clean_environ()), log_file, START_TIMEOUT_S)
    assert run.returncode is None, f"the real server exited {run.returncode}:\n{run.log[-3000:]}"
    return RealStart(flags=argv[3:], run=run)
