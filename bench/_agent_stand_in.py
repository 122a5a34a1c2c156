"""An agent stand-in for the fan-out benches: fixed JSON bodies by path, each after a fixed
delay, on 127.0.0.1 port 0, in a thread of the calling process.

    with agent_stand_in({"/v1/status": body}, {"/v1/status": 0.1}) as url:
        ...   # GET url + "/v1/status" answers body after 0.1 s; any other path is a 404

Connections are kept alive as the agent's uvicorn keeps them, and headers and body go out
without Nagle's delay (``http.server`` writes them apart), so the stand-in costs the bot what an
agent's answer costs, and nothing else.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["agent_stand_in"]


@contextmanager
def agent_stand_in(
    answers: Mapping[str, bytes], delays: Mapping[str, float] | None = None
) -> Iterator[str]:
    """Serve ``answers`` (path -> JSON body), each after ``delays[path]`` seconds (0 if
    absent); yields the base URL and stops the server on exit."""
    waits = dict(delays or {})

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            body = answers.get(path)
            time.sleep(waits.get(path, 0.0))
            self.send_response(200 if body is not None else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
