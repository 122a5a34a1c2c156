"""``setup_side_venv.sh`` without a package registry: it fails loudly and leaves no stamp.

Runs in the default suite (it needs no SGLang): ``make test-real`` must never pass by skipping
because its side virtualenv could not be built.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.real_sglang._side import SETUP

pytestmark = pytest.mark.slow  # pip's retries against a dead registry: about a minute


def test_setup_fails_saying_so_when_no_registry_answers(tmp_path: Path) -> None:
    """With pip pointed at a registry that refuses connections, the script exits 1 with "the
    side virtualenv for make test-real cannot be built: ..." and writes no stamp."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        # Nothing but an index on a port nothing listens on (9, discard): no config file, no
        # local wheels, no cache, no retries.
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "5",
    }
    done = subprocess.run(
        [str(SETUP)], env=env, capture_output=True, text=True, timeout=170, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the side virtualenv for make test-real cannot be built: pip could not" in done.stderr
    assert "is a package registry reachable?" in done.stderr
    assert not (tmp_path / "cache" / "kimi-realsgl" / "kimi-ops.stamp").exists()
