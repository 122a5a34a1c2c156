"""Crash-safe file replacement: a reader sees the old file or the new one, never half of one.

Write to a temporary file in the same directory, fsync it, rename it over the target, fsync the
directory (so the rename itself survives a power cut). The previous content can be kept beside it.
Each write passes its moments to a ``WriteHook`` (``bot.agent.write_hook``), so a test can kill
the agent between them. A temporary file (``.<name>.*.tmp``) a killed agent left behind is never
read: the target is the old content or the new, whole.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from bot.agent.write_hook import NO_WRITE_HOOK, WriteHook, WriteMoment
from bot.errors import BackendError

__all__ = ["read_json", "write_atomic", "write_json"]


def write_atomic(
    path: Path,
    data: bytes,
    keep_previous: Path | None = None,
    hook: WriteHook = NO_WRITE_HOOK,
) -> None:
    """Replace ``path`` with ``data``; copy the old content to ``keep_previous`` first."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if keep_previous is not None and path.exists():
            write_atomic(keep_previous, path.read_bytes(), hook=hook)
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                half = len(data) // 2
                handle.write(data[:half])
                handle.flush()
                hook.reach(path.name, WriteMoment.PARTIAL)
                handle.write(data[half:])
                handle.flush()
                os.fsync(handle.fileno())
            if path.exists():
                os.chmod(temp, path.stat().st_mode & 0o7777)
            else:
                os.chmod(temp, 0o644)
            hook.reach(path.name, WriteMoment.WRITTEN)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        hook.reach(path.name, WriteMoment.RENAMED)
        _fsync_dir(path.parent)
    except OSError as exc:
        raise BackendError(f"cannot write {path}: {exc}") from exc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(
    path: Path,
    value: Any,
    keep_previous: Path | None = None,
    hook: WriteHook = NO_WRITE_HOOK,
) -> None:
    """Atomically write ``value`` as indented JSON."""
    write_atomic(path, (json.dumps(value, indent=2) + "\n").encode(), keep_previous, hook)


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None if the file does not exist."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read {path}: {exc}; fix or remove the file") from exc
