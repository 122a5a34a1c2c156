"""One agent per state directory: an exclusive ``flock`` on ``<state_dir>/agent.lock``.

Two agents on one ``state_dir`` would both accept operations, both resume the one left
unfinished (every event recorded twice) and take each other's ``agent.addr``. The agent takes
the lock before it opens its state and holds it for its whole life; the file then holds the
holder's pid, so a second agent refuses at start with one line naming it::

    another kimi-ops agent (pid 4711) holds the state directory /var/lib/kimi-ops/agent ...

The kernel drops a ``flock`` when its holder dies, however it dies, so a stale file never
blocks a restart. The descriptor is not inherited by the SGLang server the agent launches (Python
opens it close-on-exec), so a server outliving the agent does not keep the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from bot.errors import StateDirLocked, StoreError

__all__ = ["LOCK_FILE", "StateDirLock"]

LOCK_FILE = "agent.lock"


class StateDirLock:
    """The held lock on one state directory; :meth:`acquire` takes it, :meth:`release` drops
    it (the process ending drops it too)."""

    def __init__(self, state_dir: Path, fd: int) -> None:
        self.state_dir = state_dir
        self._fd: int | None = fd

    @property
    def path(self) -> Path:
        return self.state_dir / LOCK_FILE

    @classmethod
    def acquire(cls, state_dir: Path, pid: int | None = None) -> StateDirLock:
        """Lock ``state_dir`` (created if missing) for ``pid`` (default this process), or raise
        :class:`StateDirLocked` naming the live holder's pid."""
        path = state_dir / LOCK_FILE
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as exc:
            raise StoreError(
                f"cannot open the agent's lock {str(path)!r} ({exc}); set [agent] state_dir to "
                "a writable folder"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder is not None else "a pid it has not written yet"
            raise StateDirLocked(
                f"another kimi-ops agent ({who}) holds the state directory {state_dir} "
                f"({LOCK_FILE}); stop it, or give this agent its own [agent] state_dir",
                holder,
            ) from exc
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid() if pid is None else pid}\n".encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"cannot write the agent's lock {str(path)!r}: {exc}") from exc
        return cls(state_dir, fd)

    def release(self) -> None:
        """Drop the lock. The file stays: an agent starting while it is unlinked could lock the
        old file while the next one locks a new file of the same name, and both would run."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
