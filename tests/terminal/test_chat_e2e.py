"""``kimi-ops chat`` end to end: a subprocess per command, against a real agent on the simulator
and a SQLite store it migrates itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chat.conftest import TOKEN, TOKEN_ENV, RunningAgent, SimHost, agent_on_sim

# The field notes' figures: ratio 4 on the 8-GPU host: 637,097 host tokens per rank; with the
# model's config (MLA: (512 + 64) x 61 layers x 2 bytes = 70,272 B/token) planned exactly as SGLang
# logs it, 44.77 GB; size 300 needs 8 x 300 = 2,400 GB.
HOST_TOKENS = 159_274 * 4 + 1
HOST_GB = f"{HOST_TOKENS * (512 + 64) * 61 * 2 / 1e9:.2f}"


@dataclass
class Chat:
    """Runs ``python -m bot chat --config FILE ARGS`` and keeps what it printed."""

    config: Path
    env: dict[str, str]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bot", "chat", "--config", str(self.config), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[RunningAgent]:
    with agent_on_sim(tmp_path / "kimi-01", SimHost()) as running:
        yield running


@pytest.fixture
def chat(tmp_path: Path, agent: RunningAgent) -> Chat:
    config = tmp_path / "chat.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path / "kimi-ops.db"}"\n'
        '[policy]\nappliers = ["ana"]\nrequire_second_person = true\n'
        f'[hosts.kimi-01]\nurl = "{agent.url}"\ntoken_env = "{TOKEN_ENV}"\n',
        encoding="utf-8",
    )
    return Chat(config, {**os.environ, TOKEN_ENV: TOKEN})


@pytest.mark.slow
def test_a_whole_resize_from_the_terminal(chat: Chat) -> None:
    """ben proposes ratio 4 (exit 0, a proposal id), ana applies it: progress lines to 100%, the
    final line with the logged figures, exit 0; history shows it ready, planned beside logged."""
    proposed = chat("--as", "ben", "resize", "ratio", "4")
    assert proposed.returncode == 0, proposed.stderr
    head = r"Proposal #(\d+) for kimi-01: hicache ratio 2 x device pool -> ratio 4"
    match = re.search(head, proposed.stdout)
    assert match, proposed.stdout
    assert f"{HOST_TOKENS:,} tokens  {HOST_GB} GB" in proposed.stdout
    assert f"apply with: kimi-ops chat apply {match.group(1)}" in proposed.stdout

    applied = chat("--as", "ana", "apply", match.group(1))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    lines = applied.stdout.splitlines()
    bars = [line for line in lines if line.startswith("[")]
    assert bars[-1].startswith("[####################] 100%  ready")
    assert any("loading weights" in line for line in bars)
    percents = [int(line[23:26]) for line in bars]
    assert percents == sorted(percents)
    assert "@ben @ana: Resize kimi-01: hicache ratio 4 is ready" in lines
    assert lines[-1].startswith(f"READY kimi-01: 159,274 device tokens/rank; host {HOST_TOKENS:,}")
    assert f"{HOST_GB} GB per rank (planned {HOST_GB}) x 8" in lines[-1]

    history = chat("--as", "ben", "history", "1")
    assert history.returncode == 0
    row = history.stdout.splitlines()[1].split()
    assert row[1:7] == ["kimi-01", "ratio", "4", "ready", "ben", "ana"]
    assert row[7:9] == [HOST_GB, HOST_GB]


@pytest.mark.slow
def test_refusals_from_the_terminal(chat: Chat) -> None:
    """size 300 is refused with the arithmetic (exit 3); the proposer may not apply his own
    proposal under the second-person rule (exit 3); bad input is a usage error (exit 2)."""
    refused = chat("--as", "ben", "resize", "size", "300")
    assert refused.returncode == 3
    assert "REFUSED: size 300 GB/rank needs 8 ranks x 300.00 GB = 2400.0 GB" in refused.stdout
    assert "nothing to apply" in refused.stdout

    mine = chat("--as", "ana", "resize", "ratio", "4")
    pid = re.search(r"Proposal #(\d+)", mine.stdout)
    assert pid, mine.stdout
    own = chat("--as", "ana", "apply", pid.group(1))
    assert own.returncode == 3
    assert "the policy asks a second person to apply it" in own.stdout

    usage = chat("--as", "ana", "resize", "size", "44.5")
    assert usage.returncode == 2
    assert "SGLang takes whole GB per rank (try 44 or 45)" in usage.stdout
    assert "usage: resize ratio <R> [host] | resize size <GB> [host]" in usage.stdout
