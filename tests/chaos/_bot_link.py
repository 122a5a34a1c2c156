"""A TCP link between the bot and the agent that a chaos test can cut or make hold its answers.

The bot's config names the link's port as the agent's URL; every connection the bot opens is
relayed to the agent's fixed port, so the agent may be killed and started again behind it.

- :meth:`AgentLink.cut` closes every open connection and closes each new one at once: to the
  bot the agent is not answering (a connection reset, not a slow timeout), as when its host or
  the network goes away. :meth:`AgentLink.restore` relays again.
- :meth:`AgentLink.hold_answers_to` relays a request whose first bytes match (``POST
  /v1/operations``) but never relays the agent's answer to it: the agent acts, the bot waits.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

__all__ = ["AgentLink"]

_CHUNK = 65536
_ACCEPT_POLL_S = 0.1


@dataclass
class _Pair:
    client: socket.socket
    upstream: socket.socket
    holding: bool = False
    closed: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class AgentLink:
    """Relays 127.0.0.1:``port`` to the agent on 127.0.0.1:``upstream_port``; thread-safe."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_ACCEPT_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self._cut = False
        self._hold_prefix: bytes | None = None
        self.held = threading.Event()  # set once a request's answer is being held
        self.refused = 0  # connections closed at once while cut
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="agent-link", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Close every relayed connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def hold_answers_to(self, request_prefix: bytes) -> None:
        """Never relay the answer to the next request starting with ``request_prefix``."""
        with self._lock:
            self._hold_prefix = request_prefix
        self.held.clear()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:
                self.refused += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._upstream_port), timeout=5)
            except OSError:
                client.close()  # the agent is down: the bot sees the connection drop
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.append(pair)
            for source, sink, outbound in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(pair, source, sink, outbound), daemon=True
                ).start()

    def _pump(self, pair: _Pair, source: socket.socket, sink: socket.socket, out: bool) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                if out:
                    self._maybe_hold(pair, data)
                elif pair.holding:
                    continue  # the agent answered; the bot never hears it
                sink.sendall(data)
        except OSError:
            pass
        finally:
            pair.close()

    def _maybe_hold(self, pair: _Pair, data: bytes) -> None:
        with self._lock:
            prefix = self._hold_prefix
            if prefix is None or not data.startswith(prefix):
                return
            self._hold_prefix = None
        pair.holding = True
        self.held.set()
