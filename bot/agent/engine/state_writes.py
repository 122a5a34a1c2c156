"""Writing an operation's record when the state directory refuses writes (a full disk).

An operation's thread must never die of a write it could not make: the operation would stay
``running`` with nobody behind it and every later request would be refused. So each write the
engine makes goes through :class:`StateWrites`:

- ``settle(what, write)``, for a record that must exist before the next step acts on the server
  (the resume point before a stop or a start, the outcome, the final event): tried again until it
  succeeds, the thread waiting in between; nothing acts on the server meanwhile, so the host
  stays as the last record says (fail closed). The agent shutting down ends the wait
  (``Abandoned``: the operation is resumed from its last record).
- the events of a start being followed are kept in memory by the event log when they cannot be
  written (the follower and its guard go on) and written, in order, at the next write that
  succeeds.

While writes fail, status names the problem (``bot.agent.engine.notices``), and says so when the
server's own log is on the same disk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bot.agent.engine.context import Abandoned, RunnerContext
from bot.agent.engine.notices import NoticeKey
from bot.errors import StoreError

__all__ = ["RETRY_MAX_S", "StateWrites"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The longest wait between two tries of a refused write: a freed disk is used within this.
RETRY_MAX_S = 5.0
_RETRY_FIRST_S = 0.25


def _same_disk(a: Path, b: Path) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


class StateWrites:
    """Operation ``op_id``'s writes to the agent state, patient with a full disk."""

    def __init__(self, ctx: RunnerContext, op_id: int) -> None:
        self.ctx = ctx
        self.op_id = op_id

    def refused(self, what: str, exc: StoreError) -> None:
        """Say in status that ``what`` could not be written, and why."""
        settings = self.ctx.settings
        line = (
            f"operation {self.op_id} cannot record {what}: {exc}; it waits (the server is not "
            "touched until its record is written) and goes on by itself once there is room"
        )
        if _same_disk(settings.log_file.parent, settings.state_dir):
            line += (
                f". The server's own log {settings.log_file} is on the same disk: set "
                "[agent] log_file to another one"
            )
        self.ctx.notices.set(NoticeKey.STATE, line)

    def written(self) -> None:
        self.ctx.notices.set(NoticeKey.STATE, None)

    def settle(self, what: str, write: Callable[[], T]) -> T:
        """``write()``'s result once it succeeds (see the module docstring)."""
        delay = _RETRY_FIRST_S
        while True:
            try:
                result = write()
            except StoreError as exc:
                self.refused(what, exc)
                log.warning("operation %s: cannot record %s (%s); retrying", self.op_id, what, exc)
                if self.ctx.stop.is_set():
                    raise Abandoned from exc
                self.ctx.clock.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            self.written()
            return result
