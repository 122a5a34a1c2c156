"""HTTP mode: the Bolt app behind uvicorn on ``/slack/events``, signature-checked by Bolt.

Bolt's Starlette adapter calls ``app.dispatch`` on the event loop, which would serialize every
request behind the slowest; here it runs in a worker thread, so twenty requests at once are
acked at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

import uvicorn
from slack_bolt import App
from slack_bolt.adapter.starlette.handler import to_bolt_request, to_starlette_response
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.errors import ConfigError
from bot.slack.spec import REQUEST_PATH
from bot.stoppable_server import StoppableServer

__all__ = ["HttpServer", "asgi_app", "bind"]

log = logging.getLogger(__name__)


def asgi_app(app: App) -> Starlette:
    """``POST /slack/events`` for commands and interactivity alike."""

    async def events(request: Request) -> Response:
        body = await request.body()
        answer = await run_in_threadpool(app.dispatch, to_bolt_request(request, body))
        return to_starlette_response(answer)

    return Starlette(routes=[Route(REQUEST_PATH, events, methods=["POST"])])


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one), bound before anything else starts."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        raise ConfigError(f"the bot cannot listen on {host}:{port}: {exc}") from exc
    return sock


class HttpServer:
    """uvicorn serving :func:`asgi_app` on ``sock``; :meth:`start` in a thread, or :meth:`run`."""

    def __init__(self, app: App, sock: socket.socket) -> None:
        self._sock = sock
        config = uvicorn.Config(
            asgi_app(app), log_config=None, lifespan="off", server_header=False, access_log=False
        )
        self._server = StoppableServer(config, "kimi-ops bot")
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}{REQUEST_PATH}"

    def request_stop(self) -> None:
        """Ask the server to stop (at once if it has not started serving yet)."""
        self._server.should_exit = True

    def run(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM."""
        self._server.run(sockets=[self._sock])

    def start(self) -> HttpServer:
        """Serve in a background thread; returns once uvicorn has started."""
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
            name="slack-http",
            daemon=True,
        )
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise ConfigError(f"the bot's HTTP server on {self.url} did not start")
            threading.Event().wait(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._sock.close()
