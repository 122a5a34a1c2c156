"""Everything a scenario lets out, gathered as text to search for secrets: log records at every
level, files a process wrote, what Slack received, the store's rows, reprs and error texts; and
the simulated host the security scenarios run on."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bot.testing import SlackApiStandIn
from tests.chat.conftest import SMALL, SimHost

#: The small simulated host (2 GPUs, SGLang 0.5.23) serving size 8 GB/rank; with no headroom,
#: size 10 starts to ready and size 24 fails on host memory and is rolled back.
HOST = SimHost(
    profile=SMALL,
    version="0.5.23",
    headroom_gb=0,
    hicache=("--enable-hierarchical-cache", "--hicache-size", "8"),
    serving_ratio=None,
    host_name="small-01",
)


class LogCapture(logging.Handler):
    """Every record of every logger, formatted with its traceback, kept as text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextlib.contextmanager
def all_logs() -> Iterator[LogCapture]:
    """Capture every logger at DEBUG for the block (the root's level is put back after)."""
    root = logging.getLogger()
    capture = LogCapture()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(level)


@dataclass
class Exposure:
    """Named pieces of text that left the system during a scenario."""

    texts: dict[str, str] = field(default_factory=dict)

    def add(self, where: str, text: str) -> None:
        self.texts[where] = self.texts.get(where, "") + text + "\n"

    def add_files(self, root: Path) -> None:
        """``root``, or every file under it: SQLite databases as their rows, others as text."""
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if not path.is_file() or path.name.endswith(("-shm", "-wal")):
                continue
            data = path.read_bytes()
            if data.startswith(b"SQLite format 3\x00"):
                with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                    self.add(f"file {path}", "\n".join(db.iterdump()))
            else:
                self.add(f"file {path}", data.decode("utf-8", errors="replace"))

    def add_slack(self, slack: SlackApiStandIn) -> None:
        """What the Slack Web API received: every body (messages, uploads, replies to
        response_url), not the headers, which carry the bot token to Slack as they must."""
        for call in slack.calls():
            self.add(f"slack {call.method}", call.raw_body.decode("utf-8", errors="replace"))

    def hits(self, secrets: Iterable[str]) -> list[str]:
        """``where: secret`` for each secret found in each text."""
        return [
            f"{where}: {secret[:6]}..."
            for where, text in self.texts.items()
            for secret in secrets
            if secret in text
        ]
