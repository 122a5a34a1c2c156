"""Following the server's log file by name *and* by inode, as ``tail -F`` does.

The server writes to the file it was given at its start, whatever happens to the name after: a
``mv server.log server.log.1`` (or ``rm``, or logrotate's ``create``) leaves it writing to the old
inode. So the source holds the file it reads open, and on each read:

- reads what the open file gained (a moved or deleted file is still readable through it);
- a name that no longer exists is a *problem* (``problem()``), not an end: the open file is
  still followed, and the server's endpoints tell when it is ready;
- a name that now is another file (rotated, recreated) is followed from its beginning, while the
  old file is read on until the new one gets its first bytes (the server writes the old one until
  it is restarted);
- a file that shrank under the same inode (``: > server.log``, logrotate's ``copytruncate``) is
  read again from its beginning.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import BinaryIO

from bot.errors import BackendError

__all__ = ["FileLogSource"]


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


class FileLogSource:
    """Reads what is appended to the log at ``path`` from byte ``offset``, never blocking."""

    def __init__(self, path: Path, offset: int) -> None:
        self._path = path
        self._offset = offset  # where the first file opened starts reading
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # Open files, oldest first; the last is the one the name pointed at when last seen.
        self._files: list[tuple[BinaryIO, tuple[int, int]]] = []
        self._opened = False
        self._problem: str | None = None
        self._closed = False

    def problem(self) -> str | None:
        """Why the log cannot be followed by its name now (moved, deleted, never created)."""
        return self._problem

    def read_new(self) -> str:
        if self._closed:
            return ""
        try:
            return self._decoder.decode(self._read())
        except OSError as exc:
            raise BackendError(f"cannot read the server log {self._path}: {exc}") from exc

    def _read(self) -> bytes:
        try:
            named: os.stat_result | None = os.stat(self._path)
        except FileNotFoundError:
            named = None
        if named is not None and (not self._files or self._files[-1][1] != _identity(named)):
            self._follow_name()
        data = b""
        if len(self._files) > 1 and os.fstat(self._files[-1][0].fileno()).st_size > 0:
            # The new file has bytes: the writer moved to it. Read the old ones to their end.
            for handle, _ in self._files[:-1]:
                data += handle.read()
                handle.close()
            del self._files[:-1]
        for handle, _ in self._files:
            if os.fstat(handle.fileno()).st_size < handle.tell():
                handle.seek(0)  # truncated in place: written again from its beginning
            data += handle.read()
        if named is None:
            self._problem = (
                f"the server log {self._path} was moved or deleted; reading the file the "
                "server still writes and following its endpoints"
                if self._files
                else f"the server log {self._path} does not exist; following the server's endpoints"
            )
        else:
            self._problem = None
        return data

    def _follow_name(self) -> None:
        """Open the file the name points at now (a new file after a rotation: from its start)."""
        try:
            handle = self._path.open("rb")
        except FileNotFoundError:
            return  # gone again between the stat and the open: the next read looks again
        stat = os.fstat(handle.fileno())
        offset = 0 if self._opened else self._offset
        handle.seek(offset if stat.st_size >= offset else 0)
        self._opened = True
        if len(self._files) > 1:  # rotated twice before the writer moved: keep the first and new
            old, _ = self._files.pop()
            old.close()
        self._files.append((handle, _identity(stat)))

    def close(self) -> None:
        self._closed = True
        for handle, _ in self._files:
            handle.close()
        self._files = []
