"""uvicorn, stopped by SIGINT or SIGTERM without being killed by them.

uvicorn re-raises a captured signal after its shutdown, which kills the process before it can
close what it holds (the agent's state, the bot's watchers and store). This server only asks
itself to stop; a second SIGINT forces the exit, as uvicorn's own does. Both HTTP servers of
kimi-ops (the agent's API and the bot's ``/slack/events``) run on it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

__all__ = ["StoppableServer"]

log = logging.getLogger(__name__)


class StoppableServer(uvicorn.Server):
    """``uvicorn.Server`` whose signal handlers set ``should_exit`` and log ``name`` stopping."""

    def __init__(self, config: uvicorn.Config, name: str) -> None:
        super().__init__(config)
        self._name = name

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals can only be handled in the main thread; a server run in another thread (tests,
        # the bot's HTTP mode beside Bolt) is stopped by its owner instead.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        originals = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, _frame: FrameType | None) -> None:
        log.info("%s: %s received, stopping", self._name, signal.Signals(sig).name)
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True
