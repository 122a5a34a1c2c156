"""The body limit (``bot.agent.http._auth.BodyLimit``): 413 before a large body is read, on a
real agent and on the layer alone."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from bot.agent.http._auth import BodyLimit
from tests.agent._api_helpers import TOKEN
from tests.agent.http._real_agent import real_agent

MB = 1024 * 1024
_CHUNK = b"x" * (256 * 1024)


def _stream(url: str, path: str, size: int, chunked: bool) -> tuple[int, bytes, int]:
    """POST ``size`` bytes to ``path`` from a generator (the test never holds them), stopping
    as soon as the agent answers; the status, the response and the bytes sent."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\n{framing}\r\n\r\n"
    ).encode()

    def pieces() -> Iterator[bytes]:
        yield head
        sent = 0
        while sent < size:
            piece = _CHUNK[: size - sent]
            sent += len(piece)
            yield (b"%x\r\n" % len(piece) + piece + b"\r\n") if chunked else piece
        if chunked:
            yield b"0\r\n\r\n"

    answer = b""
    sent_bytes = 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for piece in pieces():
            if select.select([sock], [], [], 0)[0]:
                break  # the agent answered mid-body
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent_bytes += len(piece)
        sock.settimeout(30)
        while True:  # the agent closes the connection after a 413
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, answer, sent_bytes


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_300_mb_body_gets_413_and_the_agent_stays_small(tmp_path: Path, chunked: bool) -> None:
    """A 300 MB authorised POST /v1/plans (declared or chunked) gets 413 long before it is all
    sent, the agent's RSS grows by a few MB at most, and a 300 MB operation request starts
    nothing. Failed before the fix: the agent read the whole body (78 to 309 MB RSS)."""
    with real_agent(tmp_path) as agent:
        httpx.get(f"{agent.url}/v1/status", headers={"Authorization": f"Bearer {TOKEN}"})
        before = agent.rss_kib()
        status, answer, sent = _stream(agent.url, "/v1/plans", 300 * MB, chunked)
        grown_kib = agent.rss_kib() - before
        op_status, _, _ = _stream(agent.url, "/v1/operations", 300 * MB, chunked)
        listed = httpx.get(
            f"{agent.url}/v1/operations",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        ).json()
    assert status == 413, answer[:300]
    assert b"65536 bytes" in answer
    assert sent < 50 * MB
    assert grown_kib < 8 * 1024
    assert op_status == 413
    assert listed["operations"] == []


async def _echo_length(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that reads the whole body and answers its length."""
    total = 0
    while True:
        message = await receive()
        total += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = json.dumps({"length": total}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


async def _post(content: bytes | Iterator[bytes], max_bytes: int = 1024) -> httpx.Response:
    transport = httpx.ASGITransport(BodyLimit(_echo_length, max_bytes))

    async def chunks() -> object:
        assert not isinstance(content, bytes)
        for piece in content:
            yield piece

    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
        body = content if isinstance(content, bytes) else chunks()
        return await client.post("/v1/plans", content=body)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_body_at_the_limit_passes_and_one_byte_more_is_413() -> None:
    """1,024 bytes reach the app; 1,025 get 413 naming the limit."""
    assert (await _post(b"a" * 1024)).json() == {"length": 1024}
    refused = await _post(b"a" * 1025)
    assert refused.status_code == 413
    assert "1024 bytes" in refused.json()["detail"]


@pytest.mark.anyio
async def test_a_streamed_body_is_cut_once_it_passes_the_limit() -> None:
    """A body streamed without a length is counted as it comes: 413 once past the limit, and
    the stream is not read to its end."""
    taken: list[int] = []

    def endless() -> Iterator[bytes]:
        for index in range(10_000):
            taken.append(index)
            yield b"b" * 100

    refused = await _post(endless())
    assert refused.status_code == 413
    assert len(taken) < 100
