"""Long-polls on their own budget: waiting costs no thread, and each token may hold only so many.

``GET /v1/operations/N?wait=S`` waits for the operation's next event. A waiting poll is an
``asyncio`` future on the event loop, not a worker thread, so any number of them leaves the
thread pool to ``/v1/status`` and the other routes. One thread (the feed) waits on the agent's
state for a committed change and wakes every waiting poll; a woken poll reads its events through a
small pool of its own (``READ_THREADS``), so a burst of wake-ups never queues ahead of a status
call either. A poll also re-reads every ``RECHECK_S`` without being woken (a change the feed saw
between two of its waits), and all of them answer at once when the agent stops.

Each token may have ``[agent] max_polls_per_token`` polls waiting at once; one more is answered
``429`` with ``Retry-After`` instead of waiting (:class:`PollSlots`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import anyio
import anyio.to_thread
from starlette.types import Message

__all__ = ["READ_THREADS", "RECHECK_S", "ChangeFeed", "PollSlots", "client_gone"]

#: Threads reading a woken poll's events (SQLite reads of a few rows each).
READ_THREADS = 4
#: The longest a poll waits without re-reading, woken or not.
RECHECK_S = 5.0
# How long the feed waits on the state per turn: the bound on noticing that the agent stops.
_FEED_WAIT_S = 0.5


class PollSlots:
    """How many polls each token has waiting; :meth:`take` refuses past ``per_token``. Used from
    the event loop only, so it needs no lock."""

    def __init__(self, per_token: int) -> None:
        self.per_token = per_token
        self._held: dict[Hashable, int] = {}

    def take(self, token: Hashable) -> bool:
        held = self._held.get(token, 0)
        if held >= self.per_token:
            return False
        self._held[token] = held + 1
        return True

    def give_back(self, token: Hashable) -> None:
        held = self._held.get(token, 0) - 1
        if held > 0:
            self._held[token] = held
        else:
            self._held.pop(token, None)


class ChangeFeed:
    """Wakes waiting polls when ``wait_changed`` (the state's: blocks up to its timeout, True
    when a change was committed) returns True, or when ``stopping`` is set."""

    def __init__(self, wait_changed: Callable[[float], bool], stopping: threading.Event) -> None:
        self._wait_changed = wait_changed
        self._stopping = stopping
        self._lock = threading.Lock()
        self._waiters: set[asyncio.Future[None]] = set()
        self._thread: threading.Thread | None = None
        self._reads: anyio.CapacityLimiter | None = None

    async def read(self, call: Callable[..., Any], *args: Any) -> Any:
        """Run ``call(*args)`` in the polls' own thread pool."""
        if self._reads is None:
            self._reads = anyio.CapacityLimiter(READ_THREADS)
        return await anyio.to_thread.run_sync(call, *args, limiter=self._reads)

    def subscribe(self) -> asyncio.Future[None]:
        """A future set at the next change. Subscribe *before* reading, so a change committed
        between the read and the wait still wakes the poll."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiters.add(future)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kimi-long-polls", daemon=True
                )
                self._thread.start()
        return future

    def unsubscribe(self, future: asyncio.Future[None]) -> None:
        with self._lock:
            self._waiters.discard(future)

    async def wait(
        self,
        future: asyncio.Future[None],
        timeout_s: float,
        gone: asyncio.Future[Any] | None = None,
    ) -> None:
        """Until ``future`` is woken, ``gone`` is done (the client left) or ``timeout_s``
        passes."""
        waited: set[asyncio.Future[Any]] = {future} if gone is None else {future, gone}
        try:
            await asyncio.wait(
                waited, timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            self.unsubscribe(future)

    def _run(self) -> None:
        while True:
            changed = self._wait_changed(_FEED_WAIT_S)
            with self._lock:
                if not self._waiters:
                    self._thread = None  # started again by the next subscriber
                    return
                if not (changed or self._stopping.is_set()):
                    continue
                woken, self._waiters = self._waiters, set()
            for future in woken:
                with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                    future.get_loop().call_soon_threadsafe(_wake, future)


async def client_gone(receive: Callable[[], Awaitable[Message]]) -> None:
    """Return once the ASGI ``receive`` reports the client disconnected (a GET's empty body is
    read and dropped on the way)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
