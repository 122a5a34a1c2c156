"""Crash-safe file replacement: a reader sees the old file or the new one, never half of one.

Write to a temporary file in the same directory, fsync it, rename it over the target, fsync the
directory (so the rename itself survives a power cut). The previous content can be kept beside it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from bot.errors import BackendError

__all__ = ["read_json", "write_atomic", "write_json"]


def write_atomic(path: Path, data: bytes, keep_previous: Path | None = None) -> None:
    """Replace ``path`` with ``data``; copy the old content to ``keep_previous`` first."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if keep_previous is not None and path.exists():
            write_atomic(keep_previous, path.read_bytes())
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            if path.exists():
                os.chmod(temp, path.stat().st_mode & 0o7777)
            else:
                os.chmod(temp, 0o644)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
    except OSError as exc:
        raise BackendError(f"cannot write {path}: {exc}") from exc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, value: Any, keep_previous: Path | None = None) -> None:
    """Atomically write ``value`` as indented JSON."""
    write_atomic(path, (json.dumps(value, indent=2) + "\n").encode(), keep_previous)


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None if the file does not exist."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read {path}: {exc}; fix or remove the file") from exc
