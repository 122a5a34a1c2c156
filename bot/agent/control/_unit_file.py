"""The drop-in's text: an argv written as a unit file's ``ExecStart`` and read back.

``quote_argv(["python3", "-m", "sglang.launch_server", "--served-model-name", "kimi $1"])``
gives ``"python3" "-m" "sglang.launch_server" "--served-model-name" "kimi $$1"``: each argument
double-quoted, ``$`` and ``%`` doubled so systemd expands neither; ``parse_exec_start`` reads it
back (and plain unquoted words).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bot.errors import BackendError

__all__ = ["DROP_IN_NAME", "drop_in_argv", "drop_in_text", "parse_exec_start", "quote_argv"]

DROP_IN_NAME = "50-kimi-ops-hicache.conf"


def quote_argv(argv: Sequence[str]) -> str:
    """One ExecStart value: each argument double-quoted; ``\\`` and ``"`` escaped, ``$`` and
    ``%`` doubled so systemd neither expands variables nor specifiers in them."""
    quoted = []
    for arg in argv:
        if "\n" in arg or "\0" in arg:
            raise BackendError(f"argument {arg!r} cannot be written to a unit file (newline/NUL)")
        escaped = arg.replace("\\", "\\\\").replace('"', '\\"')
        quoted.append('"' + escaped.replace("$", "$$").replace("%", "%%") + '"')
    return " ".join(quoted)


def parse_exec_start(value: str) -> list[str]:
    """The argv of an ExecStart value (the inverse of ``quote_argv``; also plain words)."""
    argv: list[str] = []
    current: list[str] = []
    quote: str | None = None
    in_word = False
    i = 0
    while i < len(value):
        ch = value[i]
        if quote is None and ch in " \t":
            if in_word:
                argv.append("".join(current))
                current, in_word = [], False
        elif quote is None and ch in "\"'":
            quote, in_word = ch, True
        elif quote is not None and ch == quote:
            quote = None
        elif ch == "\\" and i + 1 < len(value):
            i += 1
            current.append(value[i])
            in_word = True
        elif ch in "$%" and value[i + 1 : i + 2] == ch:
            i += 1
            current.append(ch)
            in_word = True
        else:
            current.append(ch)
            in_word = True
        i += 1
    if quote is not None:
        raise BackendError(f"unterminated quote in ExecStart={value}")
    if in_word:
        argv.append("".join(current))
    return argv


def drop_in_argv(path: Path) -> list[str] | None:
    """The argv of a drop-in's last non-empty ``ExecStart=``; None without a file or a line."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BackendError(f"cannot read {path}: {exc}") from exc
    values = [line.partition("=")[2].strip() for line in lines if line.startswith("ExecStart=")]
    values = [value for value in values if value]
    return parse_exec_start(values[-1]) if values else None


def drop_in_text(argv: Sequence[str]) -> str:
    """A drop-in that replaces the unit's ExecStart with ``argv`` (the empty line resets it)."""
    return f"[Service]\nExecStart=\nExecStart={quote_argv(argv)}\n"
