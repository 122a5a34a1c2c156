"""Connection hygiene on a real agent (``bot.agent.http._connections``): half-open connections
past the caps, a header timeout, and an agent with few file descriptors."""

from __future__ import annotations

import contextlib
import errno
import resource
import select
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.agent._api_helpers import auth
from tests.agent.http._real_agent import RESIZE, real_agent, run_operation

pytestmark = pytest.mark.slow

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
