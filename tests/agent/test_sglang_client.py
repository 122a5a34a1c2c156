"""The SGLang client: status codes only, /server_info with its fallback, Prometheus parsing."""

from __future__ import annotations

import httpx

from bot.agent.sglang_client import SGLangClient
from bot.settings import Secret


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


def test_admin_calls_carry_the_key_only_in_the_authorization_header() -> None:
    """The runtime API's calls send ``Bearer <key>`` and the body SGLang names; the key is in
    no repr and in no body."""
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="HiCache storage backend attached.\n")

    client = SGLangClient(
        "http://sglang.test", transport=httpx.MockTransport(server), admin_api_key=Secret("s3")
    )
    reply = client.attach_storage("file", '{"a": 1}', write_policy="write_back")
    assert (reply.ok, reply.message) == (True, "HiCache storage backend attached.")
    assert client.detach_storage().ok
    assert client.clear_storage().ok
    assert [(r.method, r.url.path) for r in seen] == [
        ("PUT", "/hicache/storage-backend"),
        ("DELETE", "/hicache/storage-backend"),
        ("POST", "/hicache/storage-backend/clear"),
    ]
    assert all(r.headers["authorization"] == "Bearer s3" for r in seen)
    assert seen[0].content == (
        b'{"hicache_storage_backend":"file","hicache_storage_backend_extra_config_json":'
        b'"{\\"a\\": 1}","hicache_write_policy":"write_back"}'
    )
    assert "s3" not in repr(vars(client))
    assert "s3" not in repr(reply)


def test_load_reads_v1_loads_then_get_load_and_none_when_neither_answers() -> None:
    """0.5.23's /v1/loads is summed over ranks; without it /get_load is; neither gives None."""

    def new(request: httpx.Request) -> httpx.Response:
        ranks = [
            {"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1},
            {"dp_rank": 1, "num_running_reqs": 0, "num_waiting_reqs": 3},
        ]
        return httpx.Response(200, json={"version": "0.5.23", "loads": ranks})

    def old(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/get_load":
            return httpx.Response(200, json=[{"dp_rank": 0, "num_reqs": 1, "num_waiting_reqs": 0}])
        return httpx.Response(404)

    loaded = _client(httpx.MockTransport(new)).load()
    assert loaded is not None
    assert (loaded.running, loaded.waiting, loaded.ranks) == (2, 4, 2)
    assert not loaded.idle
    older = _client(httpx.MockTransport(old)).load()
    assert older is not None
    assert (older.running, older.waiting) == (1, 0)
    assert _client(httpx.MockTransport(lambda r: httpx.Response(404))).load() is None
