"""The SGLang client: status codes only, /server_info with its fallback, Prometheus parsing."""

from __future__ import annotations

import httpx

from bot.agent.sglang_client import SGLangClient


def _client(handler: httpx.MockTransport) -> SGLangClient:
    return SGLangClient("http://sglang.test", transport=handler)


def test_health_is_the_status_code_and_none_when_unreachable() -> None:
    """/health gives its code whatever the (empty) body; a refused connection gives None."""
    codes = iter([503, 200])
    ok = _client(httpx.MockTransport(lambda request: httpx.Response(next(codes), content=b"")))
    assert ok.health() == 503
    assert ok.health() == 200

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert _client(httpx.MockTransport(refuse)).health() is None


def test_server_info_falls_back_to_the_deprecated_route_on_404() -> None:
    """An old server without /server_info answers on /get_server_info."""
    seen: list[str] = []

    def old_server(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/get_server_info":
            return httpx.Response(200, json={"hicache_size": 48, "hicache_ratio": 2.0})
        return httpx.Response(404)

    info = _client(httpx.MockTransport(old_server)).server_info()
    assert info == {"hicache_size": 48, "hicache_ratio": 2.0}
    assert seen == ["/server_info", "/get_server_info"]


def test_server_info_is_none_on_errors_and_non_objects() -> None:
    """A 503, a non-JSON body or a JSON list all read as "no info"."""
    for response in (httpx.Response(503), httpx.Response(200, text="<html>"),
                     httpx.Response(200, json=[1, 2])):  # fmt: skip
        client = _client(httpx.MockTransport(lambda request, r=response: r))
        assert client.server_info() is None


def test_metrics_parses_prometheus_text() -> None:
    """Labels are dropped, series of one name summed, comments and junk skipped."""
    text = (
        "# HELP sglang:token_usage The token usage\n"
        "# TYPE sglang:token_usage gauge\n"
        'sglang:token_usage{model_name="kimi"} 0.42\n'
        'sglang:num_running_reqs{model_name="kimi",dp="0"} 3\n'
        'sglang:num_running_reqs{model_name="kimi",dp="1"} 4\n'
        "sglang:hicache_host_total_tokens 637097 1700000000000\n"
        "garbage line\n"
        "sglang:bad NaN\n"
    )
    client = _client(httpx.MockTransport(lambda request: httpx.Response(200, text=text)))
    assert client.metrics() == {
        "sglang:token_usage": 0.42,
        "sglang:num_running_reqs": 7.0,
        "sglang:hicache_host_total_tokens": 637097.0,
    }
    empty = _client(httpx.MockTransport(lambda request: httpx.Response(200, text="")))
    assert empty.metrics() == {}
    missing = _client(httpx.MockTransport(lambda request: httpx.Response(404)))
    assert missing.metrics() is None
