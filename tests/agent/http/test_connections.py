"""Connection hygiene on a real agent (``bot.agent.http._connections``): half-open connections
past the caps, a header timeout, and an agent with few file descriptors."""

from __future__ import annotations

import contextlib
import errno
import logging
import resource
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from bot.agent.http._connections import ConnectionCounts, guarded_protocol
from bot.log_throttle import LogThrottle
from tests.agent._api_helpers import auth
from tests.agent.http._real_agent import RESIZE, real_agent, run_operation

FLOOD = 1100
HEADER_TIMEOUT_S = 2.0
PARTIAL = b"GET /v1/status HTTP/1.1\r\nHost: agent\r\nX-Slow: "


def _lower_open_files() -> None:
    """Run in the agent's child before exec: 256 open files, as a service without LimitNOFILE
    on a small host might have."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _open_half(url: str, count: int, source: str) -> list[socket.socket]:
    """``count`` connections from ``source`` that send part of a request's headers and stop."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    socks: list[socket.socket] = []
    poller = select.poll()  # select() takes no descriptor above 1,023
    for _ in range(count):
        sock = socket.socket()
        socks.append(sock)
        sock.setblocking(False)
        sock.bind((source, 0))
        code = sock.connect_ex((host, int(port)))
        assert code in (0, errno.EINPROGRESS), errno.errorcode.get(code)
        poller.register(sock, select.POLLOUT)
    by_fd = {sock.fileno(): sock for sock in socks}
    deadline = time.monotonic() + 20
    while by_fd and time.monotonic() < deadline:
        for fd, _ in poller.poll(500):
            poller.unregister(fd)
            with contextlib.suppress(OSError):  # refused and closed by the agent already
                by_fd.pop(fd).send(PARTIAL)
    return socks


def _answers(socks: list[socket.socket]) -> list[bytes | None]:
    """What the agent sent each of ``socks`` before closing it; None for one still open."""
    answers: list[bytes | None] = []
    for sock in socks:
        got = b""
        try:
            while data := sock.recv(65536):
                got += data
        except BlockingIOError:
            answers.append(None)
            continue
        except OSError:
            pass  # reset: closed by the agent
        answers.append(got)
    return answers


@pytest.mark.slow
def test_a_flood_of_half_open_connections_neither_starves_nor_fails_anything(
    tmp_path: Path,
) -> None:
    """An agent limited to 256 open files, under 1,100 connections from one client that each
    send part of their headers: an authorised /v1/status from another address answers, ten
    half-open connections from a third address are answered 408 and closed after the header
    timeout, a resize submitted meanwhile ends ready, and the agent's log stays a few lines.
    Failed before the fix: the agent ran out of descriptors, logged "socket.accept() out of
    system resource" thousands of times a second, status stopped answering and the half-open
    connections stayed open."""
    with real_agent(
        tmp_path, preexec=_lower_open_files, header_timeout_s=HEADER_TIMEOUT_S
    ) as agent:
        log_before = agent.process.stderr()
        slow: list[socket.socket] = []
        flood: list[socket.socket] = []
        try:
            slow += _open_half(agent.url, 10, "127.0.0.3")
            began = time.monotonic()
            flood += _open_half(agent.url, FLOOD, "127.0.0.2")
            status = httpx.get(f"{agent.url}/v1/status", headers=auth(), timeout=10)
            time.sleep(max(0.0, began + HEADER_TIMEOUT_S + 2.0 - time.monotonic()))
            timed_out = _answers(slow)
            _, page = run_operation(agent.url, RESIZE)
            after = httpx.get(f"{agent.url}/v1/status", headers=auth(), timeout=10)
        finally:
            for sock in slow + flood:
                sock.close()
        log = agent.process.stderr()[len(log_before) :]
    assert status.status_code == 200
    assert "64 connections open from 127.0.0.2, max_connections_per_client 64" in log
    assert page["state"] == "ready", (page["operation"].get("failure"), page["events"][-3:])
    assert timed_out == [b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\n"
                         b"content-length: 0\r\n\r\n"] * 10  # fmt: skip
    assert after.status_code == 200
    assert "out of system resource" not in log
    assert "cannot accept connections" not in log  # the caps leave descriptors to spare
    assert len(log.splitlines()) < 100, log[-3000:]
    assert "serving at most 128 connections instead of max_connections 512" in (
        agent.process.stderr()
    )


@contextlib.contextmanager
def _guarded_server(total: int, per_client: int, timeout_s: float) -> Iterator[tuple[str, int]]:
    """A trivial app behind the guarded protocol, uvicorn on a free port in a thread."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    protocol = guarded_protocol(
        ConnectionCounts(total, per_client), timeout_s, LogThrottle(logging.getLogger("t"))
    )
    config = uvicorn.Config(app, log_config=None, lifespan="off", http=protocol)
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.01)
    try:
        yield sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _read_all(sock: socket.socket) -> bytes:
    got = b""
    with contextlib.suppress(ConnectionResetError):
        while data := sock.recv(65536):
            got += data
    return got


def test_a_keep_alive_connection_gets_the_header_timeout_again_for_its_next_request() -> None:
    """After a full request and its response, a connection that sends half of its next
    request's headers is answered 408 and closed after the timeout, not held."""
    with (
        _guarded_server(10, 10, 0.5) as address,
        socket.create_connection(address, timeout=10) as sock,
    ):
        sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        first = b""
        while not first.endswith(b"\r\n\r\nok"):
            first += sock.recv(65536)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n")
        began = time.monotonic()
        rest = _read_all(sock)
        waited = time.monotonic() - began
    assert first.startswith(b"HTTP/1.1 200 ")
    assert rest.startswith(b"HTTP/1.1 408 Request Timeout")
    assert waited < 5


def test_a_connection_past_the_per_client_cap_is_answered_503_and_closed() -> None:
    """With two connections open from one address and a cap of two, a third gets 503 with
    Retry-After and is closed; once one of the two closes, a new one is served."""
    with _guarded_server(10, 2, 30.0) as address:
        held = [socket.create_connection(address, timeout=10) for _ in range(2)]
        try:
            time.sleep(0.2)  # both accepted
            with socket.create_connection(address, timeout=10) as third:
                refused = _read_all(third)
            held.pop().close()
            time.sleep(0.2)
            with socket.create_connection(address, timeout=10) as fourth:
                fourth.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                served = _read_all(fourth)
        finally:
            for sock in held:
                sock.close()
    assert refused.startswith(b"HTTP/1.1 503 Service Unavailable")
    assert b"retry-after: 1" in refused
    assert served.startswith(b"HTTP/1.1 200 ")
