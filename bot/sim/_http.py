"""The simulated server's HTTP endpoints, on ``http.server`` in a thread (small RSS, no ASGI).

``/health`` answers 503 with an empty body until warmup succeeded, then 200 with an empty body
(503 again once SIGTERM's drain began);
``/server_info`` (and the deprecated ``/get_server_info``, which logs SGLang's warning) gives the
ServerArgs fields flat plus ``max_total_num_tokens``, ``internal_states`` and ``version``. Every
request gets uvicorn's access line, e.g. ``INFO:     127.0.0.1:52310 - "GET /health HTTP/1.1"
503 Service Unavailable``.

``POST /generate`` takes ``generate_s`` seconds (``KIMI_SIM_GENERATE_S``) and answers SGLang's
body, or with ``"stream": true`` its server-sent events (``data: {...}`` chunks, then
``data: [DONE]``); while draining it answers 503. ``GET /get_load`` is :mod:`bot.sim._requests`;
0.5.23 also serves ``GET /v1/loads`` (``{"loads": [{"dp_rank": 0, "num_running_reqs": 0,
"num_waiting_reqs": 0, ...}]}``) and HiCache's runtime API (``/hicache/storage-backend``:
:mod:`bot.sim._hicache_api`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bot.sim._hicache_api import AdminAnswer, LiveHiCacheState
from bot.sim._output import Log
from bot.sim._requests import InFlight

__all__ = ["HttpFront", "ServerView"]

GET_SERVER_INFO_DEPRECATED = (
    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
    "Please use '/server_info' instead."
)


@dataclass
class ServerView:
    """What the HTTP thread reads from the simulated server (set by the main thread)."""

    server_info: dict[str, Any]
    ready_endpoint: bool
    metrics_enabled: bool
    metrics: Callable[[], str]
    status: str = "starting"  # starting | ready | stopping
    health_flap: bool = False
    on_generate: Callable[[], None] = field(default=lambda: None)
    in_flight: InFlight = field(default_factory=lambda: InFlight(1))
    generate_s: float = 0.0
    # The synthetic load's (running, waiting) requests, counted into /get_load on rank 0.
    synthetic: Callable[[], tuple[int, int]] = field(default=lambda: (0, 0))
    #: HiCache's runtime API and ``/v1/loads`` (SGLang 0.5.23); None: the version has neither.
    hicache: LiveHiCacheState | None = None
    _flap_count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def busy(self) -> tuple[int, int]:
        """(running, waiting) over every rank, the synthetic load included."""
        running, waiting = self.synthetic()
        loads = self.in_flight.loads(running, waiting)
        return sum(x.num_reqs for x in loads), sum(x.num_waiting_reqs for x in loads)

    def healthy(self) -> bool:
        if self.status != "ready":
            return False
        if not self.health_flap:
            return True
        with self._lock:
            self._flap_count += 1
            return self._flap_count % 2 == 1


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers (about 40 ms on Linux), which SGLang's uvicorn never
    # makes a caller wait. TCP_NODELAY sends each write at once.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        """Silence http.server's own stderr log; uvicorn-style access lines are written instead."""

    def _send(self, status: int, body: bytes = b"", content_type: str = "") -> None:
        self.send_response(status)
        if content_type:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        # uvicorn logs the access line when the response starts, before the body is sent.
        phrase = HTTPStatus(status).phrase
        host, port = self.client_address[:2]
        self.server.log.line(
            f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {phrase}'
        )
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, payload: object, status: int = 200) -> None:
        body = json.dumps(payload, separators=(",", ":")).encode()
        self._send(status, body, "application/json")

    def _not_found(self) -> None:
        self._json({"detail": "Not Found"}, 404)

    def _answer(self, answer: AdminAnswer) -> None:
        self._send(answer.status, answer.body, answer.content_type)

    def _hicache_route(self, method: str, path: str, raw: bytes) -> bool:
        """Serve the runtime API's routes; False when ``path`` is none of them."""
        api = self.server.view.hicache
        routes = {
            ("GET", "/hicache/storage-backend"),
            ("PUT", "/hicache/storage-backend"),
            ("DELETE", "/hicache/storage-backend"),
            ("POST", "/hicache/storage-backend/clear"),
        }
        if api is None or (method, path) not in routes:
            return False
        refused = api.authorized(self.headers.get("authorization"))
        if refused is not None:
            self._answer(refused)
        elif method == "GET":
            self._answer(api.status())
        elif method == "PUT":
            self._answer(api.attach(raw))
        elif method == "DELETE":
            self._answer(api.detach())
        else:
            self._answer(api.clear())
        return True

    def _body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def do_PUT(self) -> None:
        raw = self._body()
        if not self._hicache_route("PUT", self.path.split("?", 1)[0], raw):
            self._not_found()

    def do_DELETE(self) -> None:
        raw = self._body()
        if not self._hicache_route("DELETE", self.path.split("?", 1)[0], raw):
            self._not_found()

    def do_GET(self) -> None:
        view = self.server.view
        path = self.path.split("?", 1)[0]
        if self._hicache_route("GET", path, b""):
            return
        if path in ("/health", "/health_generate"):
            self._send(200 if view.healthy() else 503)
        elif path == "/ready" and view.ready_endpoint:
            self._send(200 if view.status == "ready" else 503)
        elif path in ("/server_info", "/get_server_info"):
            if path == "/get_server_info":
                self.server.log.line(GET_SERVER_INFO_DEPRECATED)
            self._json(view.server_info)
        elif path in ("/model_info", "/get_model_info"):
            info = view.server_info
            self._json(
                {
                    "model_path": info["model_path"],
                    "tokenizer_path": info["tokenizer_path"],
                    "is_generation": True,
                }
            )
        elif path == "/get_load":
            running, waiting = view.synthetic()
            self._json([load.to_json() for load in view.in_flight.loads(running, waiting)])
        elif path == "/v1/loads" and view.hicache is not None:
            running, waiting = view.synthetic()
            loads = [
                {
                    "dp_rank": x.dp_rank,
                    "num_running_reqs": x.num_reqs,
                    "num_waiting_reqs": x.num_waiting_reqs,
                    "num_used_tokens": x.num_tokens,
                }
                for x in view.in_flight.loads(running, waiting)
            ]
            self._json({"version": view.server_info.get("version"), "loads": loads})
        elif path == "/metrics" and view.metrics_enabled:
            body = view.metrics().encode()
            self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._not_found()

    def do_POST(self) -> None:
        raw = self._body()
        path = self.path.split("?", 1)[0]
        if self._hicache_route("POST", path, raw):
            return
        if path == "/generate":
            self._generate(raw)
        elif path == "/flush_cache":
            self._send(200, b"Cache flushed.\n", "text/plain")
        else:
            self._not_found()

    def _generate(self, raw: bytes) -> None:
        view = self.server.view
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json({"error": {"message": "the body is not JSON"}}, 400)
            return
        stream = isinstance(body, dict) and body.get("stream") is True
        rank = view.in_flight.begin(_PROMPT_TOKENS + _OUTPUT_TOKENS)
        if rank is None:
            # SGLang's graceful exit: new requests are refused while the running ones finish.
            self._json({"error": {"message": "The server is shutting down"}}, 503)
            return
        try:
            view.on_generate()
            if stream:
                self._stream(view.generate_s)
            else:
                time.sleep(view.generate_s)
                self._json(_generated(_OUTPUT_TOKENS))
        finally:
            view.in_flight.end(rank, _PROMPT_TOKENS + _OUTPUT_TOKENS)

    def _stream(self, duration_s: float) -> None:
        """Server-sent events, chunked, one per output token, then ``data: [DONE]``."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        host, port = self.client_address[:2]
        self.server.log.line(f'INFO:     {host}:{port} - "POST /generate HTTP/1.1" 200 OK')
        for made in range(1, _OUTPUT_TOKENS + 1):
            time.sleep(duration_s / _OUTPUT_TOKENS)
            self._chunk(b"data: " + json.dumps(_generated(made)).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# The warmup request's figures: "The capital city of France is" -> " Paris." (7 + 3 tokens).
_PROMPT_TOKENS = 7
_OUTPUT_TOKENS = 3
_WORDS = (" Paris", ".", "")


def _generated(made: int) -> dict[str, object]:
    """SGLang's ``/generate`` body after ``made`` output tokens."""
    finished = made >= _OUTPUT_TOKENS
    return {
        "text": "".join(_WORDS[:made]),
        "meta_info": {
            "prompt_tokens": _PROMPT_TOKENS,
            "completion_tokens": made,
            "finish_reason": {"type": "stop", "matched": 2} if finished else None,
        },
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], view: ServerView, log: Log) -> None:
        super().__init__(address, _Handler)
        self.view = view
        self.log = log


class HttpFront:
    """The listening socket: bound only from the uvicorn phase on (refused before that)."""

    def __init__(self, host: str, port: int, view: ServerView, log: Log) -> None:
        self._server = _Server((host, port), view, log)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
