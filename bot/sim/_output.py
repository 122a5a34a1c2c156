"""Where the simulated server writes: log lines with SGLang's prefix, tqdm bars, tracebacks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Log"]


class Log:
    """Thread-safe writer: ``[%Y-%m-%d %H:%M:%S{prefix}] message`` lines, flushed at once.

    Log lines go to ``out``; tqdm refreshes (``\\r``-led) and uncaught tracebacks to ``err``.
    """

    def __init__(self, out: TextIO, err: TextIO, clock: Callable[[], float] = time.time) -> None:
        self._out = out
        self._err = err
        self._clock = clock
        self._lock = threading.Lock()

    def line(self, message: str, prefix: str = "") -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self._clock()))
        with self._lock:
            self._out.write(f"[{stamp}{prefix}] {message}\n")
            self._out.flush()

    def bar(self, text: str, end: str = "") -> None:
        with self._lock:
            self._err.write(f"\r{text}{end}")
            self._err.flush()

    def err(self, text: str) -> None:
        with self._lock:
            self._err.write(text)
            self._err.flush()
