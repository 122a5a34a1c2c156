"""Classify a failed start from the lines SGLang writes as it dies, keeping the decisive ones.

A rank that fails logs, for example (0.5.23, host pool too large)::

    [2026-03-02 09:14:05 TP0] Scheduler hit an exception: Traceback (most recent call last):
      File ".../sglang/srt/mem_cache/pool_host/base.py", line 98, in __init__
    ValueError: Not enough host memory available. Requesting 48.00 GB but only have 41.23 GB free.
    Please reduce the size of the hierarchical cache.
    [2026-03-02 09:14:05] Received sigquit from a child process. It usually means the child failed.

which yields ``FailureKind.HOST_MEMORY`` with the first, third and last lines kept. The generic
lines (exception, traceback, sigquit) alone give ``FailureKind.CRASH``; a specific message wins
over ``crash`` whether it arrives before or after them. A port held by another process::

    ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000):
    address already in use   (one line in the log)

yields ``FailureKind.PORT_IN_USE``.
"""

from __future__ import annotations

from datetime import datetime

from bot.startup._patterns import DEAD, DIED, EXCEPTION_LINE, EXIT_CODE, SIGKILL_CODES
from bot.startup.events import FailureKind, FailureSeen

__all__ = ["FailureTracker"]

# Texts that name a cause, quoted from SGLang (docs/sglang.md, Host pool sizing; Failure and
# teardown).
_SPECIFIC: tuple[tuple[FailureKind, tuple[str, ...]], ...] = (
    (
        FailureKind.HOST_MEMORY,
        (
            "Not enough host memory available. Requesting ",
            # An extra host pool's own check: "Not enough host memory for DSA indexer
            # hierarchical cache. Requesting 29.02 GB but only have 12.40 GB free."
            "hierarchical cache. Requesting ",
            # <= 0.5.12 asserts that the host pool is larger than the device pool.
            "The host memory should be larger than the device memory",
        ),
    ),
    (
        FailureKind.PORT_IN_USE,
        (
            # uvicorn, binding the HTTP port (srt/entrypoints/http_server.py runs it):
            # "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000):
            # address already in use"; the reuse-port path logs the OSError itself:
            # "[Errno 98] Address already in use".
            "[Errno 98]",
            "ddress already in use",
            # srt/server_args.py, checking the internal ports (PortArgs) before any rank starts:
            # "Port is already in use. dist_init_port=... port_base=... ..."
            "Port is already in use.",
            # srt/utils/network.py, wait_port_available, once it found the holder:
            # "ValueError: port_base at 30001 is not available in 30 seconds. port_base is used
            # by a process already. process.name()='nc' ..."
            "is used by a process already.",
        ),
    ),
    (
        FailureKind.GPU_BUSY,
        ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",),
    ),
    (
        FailureKind.GPU_MEMORY,
        (
            "Not enough memory. Please try to increase --mem-fraction-static.",
            "Capture cuda graph failed:",
            "CUDA out of memory",
            "CUDA error: out of memory",
            "OutOfMemoryError",
        ),
    ),
)

# Texts that say a process failed without saying why.
_GENERIC = (
    "Scheduler hit an exception:",
    "Received sigquit from a child process",
    "scheduler is dead. Please check if there are relevant logs.",
)
_TRACEBACK = "Traceback (most recent call last):"

# When two causes show up, the one closer to the root wins: a host pool SGLang refused explains
# a later kill; GPUs held by another process explain a later CUDA out-of-memory.
_PRIORITY = {
    FailureKind.CRASH: 1,
    FailureKind.OOM_KILLED: 2,
    FailureKind.GPU_MEMORY: 3,
    FailureKind.GPU_BUSY: 4,
    FailureKind.HOST_MEMORY: 5,
    # A taken port ends the start where it is met; the kill of the tree that follows it (a rank
    # dying of SIGKILL) is its consequence, never its cause.
    FailureKind.PORT_IN_USE: 6,
}

# Eight ranks can print the same traceback; a person needs a handful of lines, not hundreds.
MAX_DECISIVE_LINES = 16


def classify(message: str) -> FailureKind | None:
    """The failure kind one log message names, or ``None`` when it names none."""
    for kind, texts in _SPECIFIC:
        for text in texts:
            if text in message:
                return kind
    died = DIED.search(message)
    code = died.group(2) if died is not None else None
    exit_code = EXIT_CODE.match(message)
    if exit_code is not None:
        code = exit_code.group(1)
    if code is not None:
        return FailureKind.OOM_KILLED if code in SIGKILL_CODES else FailureKind.CRASH
    if message.startswith(_TRACEBACK):
        return FailureKind.CRASH
    for text in _GENERIC:
        if text in message:
            return FailureKind.CRASH
    return None


class FailureTracker:
    """The failure state of one start: its kind so far and its decisive lines."""

    def __init__(self) -> None:
        self.kind: FailureKind | None = None
        self._lines: list[str] = []
        self._messages: set[str] = set()
        self._host_lines: dict[str, str] = {}
        self._last_host_line: str | None = None
        self._dead_rank: str | None = None

    def note_host_line(self, rank: str | None, line: str) -> None:
        """Remember each rank's host pool line: it is what a rank did just before an OOM kill."""
        self._host_lines[rank or ""] = line
        self._last_host_line = line

    def _host_line_of_killed(self, message: str) -> str | None:
        died = DIED.search(message)
        number = died.group(1) if died is not None else self._dead_rank
        if number is not None:
            # "Rank 3" counts scheduler processes; with TP only that is the rank prefixed "TP3".
            for rank, line in self._host_lines.items():
                if rank.endswith(f"TP{number}"):
                    return line
        return self._last_host_line

    def observe(
        self, message: str, line: str, at: datetime | None, ready: bool
    ) -> FailureSeen | None:
        """Take one log message (``line`` as logged); return a new ``FailureSeen`` if it changed."""
        kind = classify(message)
        dead = DEAD.search(message)
        if dead is not None:
            self._dead_rank = dead.group(1)
        if kind is None:
            # An exception's own line ("ValueError: ...") matters only inside a failure.
            if self.kind is None or not EXCEPTION_LINE.match(message):
                return None
        elif ready and message.startswith(_TRACEBACK):
            # Once serving, SGLang logs a request's error with its traceback and keeps running.
            return None
        changed = False
        if kind is not None and (self.kind is None or _PRIORITY[kind] > _PRIORITY[self.kind]):
            self.kind = kind
            changed = True
            host_line = self._host_line_of_killed(message)
            if kind is FailureKind.OOM_KILLED and host_line is not None:
                # The pool line was logged before any failure line: it goes first.
                changed |= self._keep(host_line, host_line, first=True)
        changed |= self._keep(message, line)
        if not changed or self.kind is None:
            return None
        return FailureSeen(kind=self.kind, lines=tuple(self._lines), at=at)

    def _keep(self, message: str, line: str, first: bool = False) -> bool:
        if message in self._messages or len(self._lines) >= MAX_DECISIVE_LINES:
            return False
        self._messages.add(message)
        self._lines.insert(0 if first else len(self._lines), line)
        return True
