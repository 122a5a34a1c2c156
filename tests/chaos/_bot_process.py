"""``kimi-ops bot --http`` as a process of the chaos suite: its config, its start (bounded, on
its ready line), its SIGKILL.

The bot's store is a SQLite file migrated by Alembic, ``KIMI_SLACK_API_URL`` the Web API
stand-in served in the test process; its one host, ``kimi-01``, is reached at the URL the test
gives (a :class:`~tests.chaos._bot_link.AgentLink` the test can cut).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bot.testing import SlackApiStandIn
from tests.chat.conftest import TOKEN, TOKEN_ENV
from tests.slack._harness import ANA, BEN, SIGNING_SECRET

__all__ = ["HOST", "BotProcess", "bot_config", "store_url"]

HOST = "kimi-01"
_READY_LINE = "kimi-ops bot: listening on "


def store_url(root: Path) -> str:
    """The bot's store under ``root``."""
    return f"sqlite:///{root / 'kimi-ops.db'}"


def bot_config(root: Path, agent_url: str) -> Path:
    """The bot's TOML: the store under ``root``, ana and ben appliers, ``kimi-01`` at
    ``agent_url``, progress edits every second."""
    path = root / "bot.toml"
    path.write_text(
        f'[store]\nurl = "{store_url(root)}"\n\n'
        "[bot]\nupdate_interval_s = 1\n\n"
        f'[policy]\nappliers = ["{ANA}", "{BEN}"]\n\n'
        f'[hosts.{HOST}]\nurl = "{agent_url}"\ntoken_env = "{TOKEN_ENV}"\n',
        encoding="utf-8",
    )
    return path


@dataclass
class BotProcess:
    """``kimi-ops bot --http`` on a fixed port, started (again) and killed by the test."""

    config: Path
    port: int
    slack: SlackApiStandIn
    log: Path
    agent_token: str = TOKEN  # what the agent takes, passed in the bot's environment
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    def start(self, timeout_s: float = 60) -> None:
        """Start the bot and wait (bounded) for its ready line in the log."""
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": self.slack.bot_token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "KIMI_SLACK_API_URL": self.slack.url,
            TOKEN_ENV: self.agent_token,
        }
        argv = ["--http", "--port", str(self.port), "--listen", "127.0.0.1"]
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bot", "bot", *argv, "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )
        deadline = time.monotonic() + timeout_s
        while _READY_LINE not in self.log.read_bytes()[offset:].decode(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"kimi-ops bot did not start:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed or closed."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM, and the exit code (bounded)."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")
