"""The terminal as a :class:`~bot.chat.replies.FrontEnd`: replies printed, progress drawn in place.

On a terminal the progress block of an operation is redrawn where it stands (ANSI: cursor up,
clear to the end of the screen); into a pipe or a file each view is one more line, so a log or a
test reads every update in order.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TextIO

from bot.chat.audit import Watch
from bot.chat.policy import Actor
from bot.chat.progress import ProgressView
from bot.chat.replies import Reply
from bot.chat.wording import hhmm
from bot.fleet.view import RolloutView
from bot.terminal.rollout_wording import replica_end_line, rollout_lines
from bot.terminal.wording import (
    final_line,
    notice_line,
    progress_lines,
    reply_lines,
    unreachable_line,
)

__all__ = ["TerminalFrontEnd"]

_UP_AND_CLEAR = "\x1b[{n}F\x1b[J"


class TerminalFrontEnd:
    """Writes to ``out``; ``tty`` chooses drawing in place over one line per view."""

    def __init__(self, out: TextIO, tty: bool) -> None:
        self._out = out
        self._tty = tty
        self._lock = threading.Lock()
        self._drawn = 0  # lines of the progress block now on screen (tty only)

    def _write(self, lines: list[str], replace_block: bool = False) -> None:
        with self._lock:
            if self._tty and self._drawn and replace_block:
                self._out.write(_UP_AND_CLEAR.format(n=self._drawn))
            self._out.write("".join(f"{line}\n" for line in lines))
            self._out.flush()
            self._drawn = len(lines) if replace_block else 0

    def reply(self, actor: Actor, reply: Reply) -> None:
        self._write(reply_lines(reply))

    def progress(self, watch: Watch, view: ProgressView) -> None:
        lines = progress_lines(watch, view)
        self._write(lines if self._tty else lines[1:2], replace_block=self._tty)

    def notify(self, people: tuple[str, ...], watch: Watch, view: ProgressView) -> None:
        self._write([notice_line(people, watch, view)])

    def unreachable(self, watch: Watch, since: datetime) -> None:
        self._write([unreachable_line(watch, hhmm(since))])

    def rollout(self, view: RolloutView) -> None:
        """A rollout's block (:class:`~bot.fleet.RolloutSink`): redrawn in place on a terminal,
        its head and the changed replica's line into a pipe."""
        lines = rollout_lines(view)
        self._write(lines, replace_block=self._tty)

    def replica_ended(self, view: RolloutView, host: str) -> None:
        self._write([replica_end_line(view, host)])

    def post(self, channel: str, reply: Reply) -> None:
        """A scheduled report (:class:`~bot.chat.replies.ReportPoster`), headed by its channel."""
        self._write([f"[{channel}]", *reply_lines(reply)])

    def final(self, watch: Watch, view: ProgressView) -> None:
        """The operation's last lines, once it has ended."""
        self._write(final_line(watch, view))
