"""A test hook: the agent SIGKILLs itself in the middle of one named write.

The agent's writes that must survive a kill are of two sorts: whole-file replacements of the
server's config and the backend's records (``command.json``, ``server.json``, the systemd
drop-in, ...; ``bot.agent.control._atomic_file``) and transactions on its state file
(``agent.sqlite3``; ``bot.agent.state.agent_state``). Each passes its :class:`WriteMoment` s to
a :class:`WriteHook`: in production ``NO_WRITE_HOOK``, which does nothing.

For the chaos tests only, ``kimi-ops agent`` reads ``KIMI_AGENT_CRASH_AT`` once when it starts::

    KIMI_AGENT_CRASH_AT=command.json:written        # the first time command.json is written
    KIMI_AGENT_CRASH_AT=server.json:renamed#2       # the second time server.json is
    KIMI_AGENT_CRASH_AT=agent.sqlite3/save_resume_point:uncommitted

and, at that moment of that write, sends itself SIGKILL: nothing after it runs, as when the host
kills the agent there. A target is a file's name, or for the state file ``agent.sqlite3/`` and
the name of the ``AgentState`` method writing. The agent logs the armed point at start, so a
production log would show it; an unset or empty variable arms nothing, and a malformed one
stops the start (``ConfigError``) rather than run unhooked by mistake.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol

from bot.errors import ConfigError

__all__ = [
    "CRASH_AT_ENV",
    "NO_WRITE_HOOK",
    "KillAtWrite",
    "NoWriteHook",
    "WriteHook",
    "WriteMoment",
    "write_hook_from_environ",
]

log = logging.getLogger(__name__)

CRASH_AT_ENV = "KIMI_AGENT_CRASH_AT"


class WriteMoment(StrEnum):
    """Where a write stands when the hook is called; in the order a write passes them."""

    PARTIAL = "partial"  # half the new bytes are in the temporary file, flushed to the kernel
    WRITTEN = "written"  # the temporary file is complete and fsynced, not yet renamed
    RENAMED = "renamed"  # renamed over the target, its directory not yet fsynced
    UNCOMMITTED = "uncommitted"  # a state transaction's rows are written, not committed
    COMMITTED = "committed"  # the transaction is committed


class WriteHook(Protocol):
    """Called by each crash-safe write at each of its moments."""

    def reach(self, target: str, moment: WriteMoment) -> None: ...


class NoWriteHook:
    """Production: every moment passes."""

    def reach(self, target: str, moment: WriteMoment) -> None:
        return None


NO_WRITE_HOOK: WriteHook = NoWriteHook()


class KillAtWrite:
    """SIGKILL this process the ``occurrence``-th time ``target`` reaches ``moment``."""

    def __init__(self, target: str, moment: WriteMoment, occurrence: int = 1) -> None:
        self.target = target
        self.moment = moment
        self.occurrence = occurrence
        self._seen = 0

    def reach(self, target: str, moment: WriteMoment) -> None:
        if target != self.target or moment is not self.moment:
            return
        self._seen += 1
        if self._seen == self.occurrence:
            os.kill(os.getpid(), signal.SIGKILL)

    def __str__(self) -> str:
        return f"{self.target}:{self.moment}#{self.occurrence}"


def write_hook_from_environ(environ: Mapping[str, str]) -> WriteHook:
    """The hook ``KIMI_AGENT_CRASH_AT`` arms (see the module docstring); ``NO_WRITE_HOOK`` when
    it is unset or empty."""
    text = environ.get(CRASH_AT_ENV, "").strip()
    if not text:
        return NO_WRITE_HOOK
    where, _, count = text.partition("#")
    target, _, moment_text = where.rpartition(":")
    moments = ", ".join(m.value for m in WriteMoment)
    try:
        moment = WriteMoment(moment_text)
        occurrence = int(count) if count else 1
    except ValueError:
        raise ConfigError(
            f"{CRASH_AT_ENV}={text!r} is not <file>:<moment>[#n] with a moment among {moments} "
            "(e.g. command.json:written); unset it to run the agent without the test hook"
        ) from None
    if not target or occurrence < 1:
        raise ConfigError(
            f"{CRASH_AT_ENV}={text!r} names no file or a count below 1 "
            "(e.g. server.json:renamed#2); unset it to run the agent without the test hook"
        )
    hook = KillAtWrite(target, moment, occurrence)
    log.warning("kimi-ops agent: test hook armed: SIGKILL at %s", hook)
    return hook
