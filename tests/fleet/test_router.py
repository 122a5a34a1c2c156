"""The router client against each real sglang-router generation, in front of simulated replicas:
detection, the workers and their health as the router reports them, remove and add."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from bot.errors import RouterError, RouterUnsupported
from bot.fleet.breakers import Breaker
from bot.fleet.router import RouterApi, RouterClient, RouterWorker
from tests.fleet._replicas import serving_sims
from tests.fleet._routers import VERSIONS, start_router


def _until(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("api", list(RouterApi), ids=lambda api: VERSIONS[api])
def test_each_generation_is_detected_and_its_workers_removed_and_added(
    api: RouterApi, tmp_path: Path
) -> None:
    """Each pinned release is detected as its generation; a removed replica leaves the list and
    gets no request; added back, it is listed healthy and serves again; the breakers read from
    the router's Prometheus export are closed (0.1.x has none)."""
    with serving_sims(tmp_path, 2) as (first_sim, second_sim):
        first, second = first_sim.url, second_sim.url
        router = start_router(VERSIONS[api], [first, second], tmp_path)
        try:
            with RouterClient(router.url) as client:
                assert client.api() is api
                listed = {w.url.rstrip("/"): w.healthy for w in client.workers()}
                assert listed == {first: True, second: True}

                client.remove(second)
                _until(lambda: client.worker(second) is None, f"{second} removed")
                client.remove(second)  # idempotent: nothing to remove
                before = second_sim.served()
                for _ in range(6):
                    reply = httpx.post(f"{router.url}/generate", json={"text": "x"}, timeout=10)
                    assert reply.status_code == 200
                assert second_sim.served() == before

                client.add(second)
                _until(lambda: _healthy(client.worker(second)), f"{second} healthy again")
                client.add(second)  # idempotent: already there
                served = second_sim.served()
                for _ in range(4):
                    httpx.post(f"{router.url}/generate", json={"text": "x"}, timeout=10)
                assert second_sim.served() > served
                assert [w.url.rstrip("/") for w in client.workers()].count(second) == 1
            # Both served without a failure: their breakers read closed where there are any.
            with RouterClient(router.url, metrics_url=router.metrics_url) as reader:
                breakers = reader.breakers()
            if api is RouterApi.QUERY:
                assert breakers is None
            else:
                assert breakers is not None
                assert {first, second} <= set(breakers), breakers
                assert set(breakers.values()) == {Breaker.CLOSED}, breakers
        finally:
            router.stop()


def _healthy(worker: RouterWorker | None) -> bool:
    return worker is not None and worker.healthy


def test_a_server_with_no_worker_api_is_refused_with_what_it_answered(tmp_path: Path) -> None:
    """A URL that answers 404 to both /workers and /list_workers is refused, naming both and
    the generations kimi-ops drives; nothing is sent but reads."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return httpx.Response(404, json={"detail": "Not Found"})

    client = RouterClient("http://router.test", transport=httpx.MockTransport(handler))
    with pytest.raises(RouterUnsupported) as caught:
        client.api()
    message = str(caught.value)
    assert "GET /workers answered 404, GET /list_workers 404" in message
    assert "does not tell its version" in message
    assert "0.1.x, 0.2.x, 0.3.x" in message
    assert all(call.startswith("GET ") for call in seen)


def test_a_router_that_names_its_version_is_refused_by_it() -> None:
    """An unknown router that answers GET /version is refused with that version in the message."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/version":
            return httpx.Response(200, text="smg 9.0.0")
        return httpx.Response(410, text="gone")

    client = RouterClient("http://router.test", transport=httpx.MockTransport(handler))
    with pytest.raises(RouterUnsupported, match=r"it says it is version smg 9\.0\.0"):
        client.api()


def test_an_unreachable_router_is_a_router_error_naming_it() -> None:
    """A connection refused becomes a RouterError naming the router's URL."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = RouterClient("http://router.test:1", transport=httpx.MockTransport(handler))
    with pytest.raises(RouterError, match=r"router http://router.test:1 cannot be reached"):
        client.workers()
