"""A server loop run in a daemon thread, started and stopped by a test or a ``with`` block."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Self

__all__ = ["BackgroundServer"]


class BackgroundServer:
    """Base of the stand-ins: ``start()`` runs ``_serve()`` in a thread, ``stop()`` ends it."""

    _thread_name = "stand-in"

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def _serve(self) -> None:
        raise NotImplementedError

    def _shutdown(self) -> None:
        """Make ``_serve()`` return; called from another thread."""
        raise NotImplementedError

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self._thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._shutdown()
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
