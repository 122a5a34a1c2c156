"""Tests for the agent's HTTP API over real HTTP (uvicorn on a free port, in a thread).

The service behind it is the real one: the process backend running the simulator, the simulator's
host facts (``probe = "sim"``: the field notes' 449 GB, 8-GPU host), the SQLite state and the
operation engine. Expected figures come from SGLANG_FACTS.md's formulas and the sim profile.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.agent.config import AgentSettings
from bot.agent.http.app import create_app
from bot.agent.service import AgentService, build_service
from bot.agent.sglang_client import SGLangClient
from tests.agent._api_helpers import (
    TOKEN,
    agent_settings,
    auth,
    serve_in_thread,
    tree_listing,
)
from tests.agent.conftest import wait_until

GB = 1e9
DEVICE_TOKENS = 159_274  # kimi-k25-8gpu at mem fraction 0.88
BYTES_PER_TOKEN = 70_272
FINAL = {"ready", "failed", "rolled_back"}


@dataclass
class Live:
    settings: AgentSettings
    service: AgentService
    http: httpx.Client

    def start_server(self) -> int:
        """Start the simulator directly (not an operation); wait until it answers 200."""
        self.service.manager.control.start("test:1")
        client = SGLangClient(self.settings.server_url)
        try:
            wait_until(lambda: client.health() == 200, timeout_s=60)
        finally:
            client.close()
        pid = self.service.manager.control.status().main_pid
        assert pid is not None
        return pid

    def server_pid(self) -> int | None:
        return self.service.manager.control.status().main_pid

    def wait_final(self, op_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Long-poll the operation until it ends (bounded); return its last body and all events."""
        events: list[dict[str, Any]] = []
        after = 0
        for _ in range(120):
            response = self.http.get(
                f"/v1/operations/{op_id}", params={"after": after, "wait": 5}, headers=auth()
            )
            assert response.status_code == 200, response.text
            body = response.json()
            events += body["events"]
            after = body["last_seq"]
            if body["state"] in FINAL:
                return body, events
        pytest.fail(f"operation {op_id} did not finish")


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """The agent's API on a real socket, for an agent on the simulated kimi host."""
    settings = agent_settings(tmp_path)
    service = build_service(settings)
    try:
        with (
            serve_in_thread(create_app(service)) as url,
            httpx.Client(base_url=url, timeout=30) as client,
        ):
            yield Live(settings, service, client)
    finally:
        service.manager.close()
        service.manager.control.stop(grace_s=5)
        service.close()


ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/status", None),
    ("POST", "/v1/plans", {"ratio": 4}),
    ("POST", "/v1/operations", {"kind": "resize", "ratio": 4, "actor": "ana"}),
    ("GET", "/v1/operations/1?after=0&wait=0", None),
    ("GET", "/v1/operations?limit=5", None),
    ("GET", "/v1/revisions", None),
    ("GET", "/openapi.json", None),
    ("GET", "/no/such/route", None),
]
BAD_AUTH: list[bytes | None] = [
    None,
    b"",
    b"Bearer",
    TOKEN.encode(),
    b"Basic " + TOKEN.encode(),
    b"Token " + TOKEN.encode(),
    b"Bearer " + TOKEN.encode() + b"x",
    b"Bearer " + TOKEN[:-1].encode(),
    b"Bearer wrong",
    b"Bearer \xc3\xbc" + TOKEN.encode(),
]


@pytest.mark.slow
def test_every_route_but_healthz_needs_the_token(live: Live) -> None:
    """Missing, malformed and wrong tokens get 401 {"detail": "unauthorized"} on every route."""
    for method, path, body in ROUTES:
        for header in BAD_AUTH:
            headers = {} if header is None else {"Authorization": header}
            response = live.http.request(method, path, json=body, headers=headers)  # type: ignore[arg-type]
            assert response.status_code == 401, (method, path, header)
            assert response.json() == {"detail": "unauthorized"}
            assert response.headers["www-authenticate"] == "Bearer"
    assert live.http.get("/healthz").status_code == 200
    # None of the refused POSTs did anything.
    assert live.http.get("/v1/operations", headers=auth()).json() == {"operations": []}
    assert live.server_pid() is None


@pytest.mark.slow
def test_the_token_never_shows_in_responses_or_logs(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    """Responses to good and bad requests, and every log record meanwhile, omit the token."""
    caplog.set_level(logging.DEBUG)
    bodies = [
        live.http.get("/v1/status", headers=auth()).text,
        live.http.post("/v1/plans", json={"size_gb": 48}, headers=auth()).text,
        live.http.get("/openapi.json", headers=auth()).text,
        live.http.get("/v1/status", headers=auth(TOKEN + "x")).text,
        live.http.post("/v1/plans", json={"ratio": "abc"}, headers=auth()).text,
        live.http.get("/v1/operations/99", headers=auth()).text,
    ]
    assert all(TOKEN not in body for body in bodies)
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(live.settings)


JSON = {"content-type": "application/json"}
MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    # (route, request kwargs, a field or word the 422 must name)
    ("/v1/plans", {"json": {"ratio": "abc"}}, "ratio"),
    ("/v1/plans", {"json": {"ratio": True}}, "ratio"),
    ("/v1/plans", {"json": {"ratio": 4, "extra": 1}}, "extra"),
    ("/v1/plans", {"json": {}}, "ratio"),
    ("/v1/plans", {"content": b'{"ratio": NaN}', "headers": JSON}, "ratio"),
    ("/v1/plans", {"json": {"size_gb": 1e300}}, "size_gb"),
    ("/v1/plans", {"content": b"ratio=4"}, "body"),
    ("/v1/plans", {"content": b"ratio=4", "headers": JSON}, "body"),
    ("/v1/plans", {"json": [4]}, "body"),
    ("/v1/plans", {"json": {"auto": True, "ratio": 2}}, 'give \\"auto\\" alone'),
    ("/v1/plans", {"json": {"auto": "yes"}}, "auto"),
    ("/v1/operations", {"json": {"kind": "restart", "auto": True, "actor": "ana"}}, "resize"),
    (
        "/v1/operations",
        {"json": {"kind": "resize", "auto": True, "size_gb": 4, "actor": "a"}},
        "auto",
    ),
    ("/v1/operations", {"json": {"kind": "explode", "actor": "ana"}}, "kind"),
    ("/v1/operations", {"json": {"kind": "resize", "ratio": "abc", "actor": "ana"}}, "ratio"),
    ("/v1/operations", {"json": {"kind": "resize", "ratio": 4, "actor": "x" * 10_000}}, "actor"),
    ("/v1/operations", {"json": {"kind": "resize", "ratio": 4}}, "actor"),
    ("/v1/operations", {"json": {"kind": "resize", "actor": "ana"}}, "ratio"),
    ("/v1/operations", {"json": {"kind": "restart", "ratio": 4, "actor": "ana"}}, "resize"),
    ("/v1/operations", {"json": {"kind": "resize", "ratio": 4, "actor": "a", "x": 1}}, "x"),
    ("/v1/operations", {"json": {"kind": "rollback", "revision": "one", "actor": "a"}}, "revision"),
    ("/v1/operations", {"content": b"{not json", "headers": JSON}, "body"),
    ("/v1/operations", {"content": b"", "headers": JSON}, "body"),
    ("/v1/operations", {"json": {"kind": "resize", "size_gb": 44.5, "actor": "ana"}}, "44.5"),
    ("/v1/operations", {"json": {"kind": "resize", "ratio": -1, "actor": "ana"}}, "ratio"),
]


def _post(live: Live, path: str, kwargs: dict[str, Any]) -> httpx.Response:
    options = dict(kwargs)
    headers = {**auth(), **options.pop("headers", {})}
    return live.http.post(path, headers=headers, **options)


@pytest.mark.slow
@pytest.mark.parametrize(("path", "kwargs", "named"), MALFORMED)
def test_malformed_bodies_get_422_naming_the_field(
    live: Live, path: str, kwargs: dict[str, Any], named: str
) -> None:
    """Each bad body is a 422 whose detail names the field (or value) at fault."""
    response = _post(live, path, kwargs)
    assert response.status_code == 422, response.text
    assert named in response.text
    assert len(response.content) < 8_000  # the input is not echoed back


@pytest.mark.slow
def test_malformed_bodies_change_nothing(live: Live) -> None:
    """After every malformed request the state directory is byte-for-byte the same and no
    operation or server was started."""
    live.http.get("/v1/status", headers=auth())  # the first read stores the command
    state_dir = live.settings.state_dir
    before = {k: v for k, v in tree_listing(state_dir).items() if not k.endswith("-shm")}
    for path, kwargs, _ in MALFORMED:
        assert _post(live, path, kwargs).status_code == 422
    after = {k: v for k, v in tree_listing(state_dir).items() if not k.endswith("-shm")}
    assert after == before
    assert live.http.get("/v1/operations", headers=auth()).json() == {"operations": []}
    assert live.server_pid() is None


@pytest.mark.slow
def test_status_over_http_on_the_simulated_host(live: Live) -> None:
    """/v1/status reports the running simulator on the 449 GB, 8-GPU host with its config."""
    pid = live.start_server()
    body = live.http.get("/v1/status", headers=auth()).json()
    assert body["host"]["name"] == "kimi-test"
    assert body["server"]["state"] == "running"
    assert body["server"]["pid"] == pid
    assert body["server"]["health_code"] == 200
    assert body["config"]["hicache_ratio"] == 2.0
    assert body["config"]["effective"] == "ratio 2 x device pool"
    assert body["capacity"]["device_tokens"] == DEVICE_TOKENS
    assert body["capacity"]["ranks"] == 8
    assert body["ram"]["total_gb"] == 449.0
    assert len(body["gpus"]["devices"]) == 8
    assert body["operation"] is None


@pytest.mark.slow
def test_plans_for_the_field_notes_cases(live: Live) -> None:
    """size 300 is refused with the arithmetic, 48 fits, ratio 4 is ~44.77 GB/rank, and the
    fingerprint is the one status shows; 44.5 and ratio -1 are 422 with the Plan."""
    live.start_server()
    fingerprint = live.http.get("/v1/status", headers=auth()).json()["fingerprint"]

    refused = live.http.post("/v1/plans", json={"size_gb": 300}, headers=auth())
    assert refused.status_code == 200
    assert refused.json()["plan"]["verdict"] == "refused"
    assert "8 ranks x 300.00 GB = 2400.0 GB" in refused.json()["plan"]["reason"]
    assert refused.json()["fingerprint"] == fingerprint

    fits = live.http.post("/v1/plans", json={"size_gb": 48}, headers=auth()).json()
    assert fits["plan"]["verdict"] == "fits"
    assert fits["plan"]["total_gb"] == pytest.approx(384.0, abs=0.1)

    ratio = live.http.post("/v1/plans", json={"ratio": 4}, headers=auth()).json()
    expected = (DEVICE_TOKENS * 4 + 1) * BYTES_PER_TOKEN / GB  # 44.770 GB per rank
    assert ratio["plan"]["per_rank_gb"] == pytest.approx(expected, rel=1e-3)

    fraction = live.http.post("/v1/plans", json={"size_gb": 44.5}, headers=auth())
    assert fraction.status_code == 422
    assert "try 44 or 45" in fraction.json()["detail"]
    assert fraction.json()["plan"]["verdict"] == "refused"

    negative = live.http.post("/v1/plans", json={"ratio": -1}, headers=auth())
    assert negative.status_code == 422
    assert negative.json()["plan"]["request"]["ratio"] == -1


@pytest.mark.slow
def test_refused_operation_is_422_and_stops_nothing(live: Live) -> None:
    """An 8 x 300 GB resize is refused with the Plan before the server is touched."""
    pid = live.start_server()
    response = live.http.post(
        "/v1/operations", json={"kind": "resize", "size_gb": 300, "actor": "ana"}, headers=auth()
    )
    assert response.status_code == 422
    assert "2400.0 GB" in response.json()["detail"]
    assert response.json()["plan"]["verdict"] == "refused"
    assert live.server_pid() == pid
    assert live.http.get("/v1/operations", headers=auth()).json() == {"operations": []}


@pytest.mark.slow
def test_stale_fingerprint_is_409_and_stops_nothing(live: Live) -> None:
    """A proposal made on other facts (here after a server restart) is refused with 409."""
    live.start_server()
    old = live.http.post("/v1/plans", json={"ratio": 4}, headers=auth()).json()["fingerprint"]
    live.service.manager.control.stop(grace_s=5)
    pid = live.start_server()
    response = live.http.post(
        "/v1/operations",
        json={"kind": "resize", "ratio": 4, "actor": "ana", "fingerprint": old},
        headers=auth(),
    )
    assert response.status_code == 409
    assert old in response.json()["detail"]
    assert live.server_pid() == pid
    assert live.http.get("/v1/operations", headers=auth()).json() == {"operations": []}


@pytest.mark.slow
def test_concurrent_operation_is_409_with_holder_and_since(live: Live) -> None:
    """While a resize runs, a second request gets 409 naming who holds the server and since
    when; the first still ends ready and the revisions list both configs."""
    live.start_server()
    fingerprint = live.http.post("/v1/plans", json={"ratio": 4}, headers=auth()).json()[
        "fingerprint"
    ]
    first = live.http.post(
        "/v1/operations",
        json={"kind": "resize", "ratio": 4, "actor": "ana", "fingerprint": fingerprint},
        headers=auth(),
    )
    assert first.status_code == 202, first.text
    op = first.json()["operation"]
    assert first.headers["location"] == f"/v1/operations/{op['id']}"
    second = live.http.post(
        "/v1/operations", json={"kind": "restart", "actor": "ben"}, headers=auth()
    )
    assert second.status_code == 409
    assert second.json()["holder"] == "ana"
    assert second.json()["since"] == op["created_at"]
    assert live.http.get("/v1/status", headers=auth()).json()["operation"]["id"] == op["id"]
    final, events = live.wait_final(op["id"])
    assert final["state"] == "ready"
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    revisions = live.http.get("/v1/revisions", headers=auth()).json()["revisions"]
    assert {revision["hicache"]["ratio"] for revision in revisions} >= {2.0, 4.0}


@pytest.mark.slow
def test_long_poll_answers_with_events_after_seq_and_404_for_unknown(live: Live) -> None:
    """Events after SEQ come back (a reconnecting client loses none); a huge wait is capped,
    not refused; an unknown operation is 404."""
    live.start_server()
    submitted = live.http.post(
        "/v1/operations", json={"kind": "restart", "actor": "ana"}, headers=auth()
    )
    assert submitted.status_code == 202, submitted.text
    op_id = submitted.json()["id"]
    _, events = live.wait_final(op_id)
    again = live.http.get(
        f"/v1/operations/{op_id}", params={"after": 2, "wait": 1e9}, headers=auth()
    ).json()
    assert again["events"] == events[2:]
    assert again["operation"]["id"] == op_id
    listed = live.http.get("/v1/operations", params={"limit": 1}, headers=auth()).json()
    assert [view["id"] for view in listed["operations"]] == [op_id]
    missing = live.http.get("/v1/operations/999", headers=auth())
    assert missing.status_code == 404
    assert "999" in missing.json()["detail"]


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({}, {"enabled": True, "interval_s": 0.5, "floor_gb": 10.74}),
        (
            {"guard": False, "guard_interval_s": 2.0, "guard_floor_gb": 20},
            {"enabled": False, "interval_s": 2.0, "floor_gb": 20.0},
        ),
    ],
)
def test_status_and_plans_say_whether_the_startup_guard_is_on(
    tmp_path: Path, keys: dict[str, Any], expected: dict[str, Any]
) -> None:
    """/v1/status shows the guard's switch, interval and floor (10 GiB = 10.74 GB by default)
    as configured, and a plan's notes say whether the start it leads to is guarded."""
    service = build_service(agent_settings(tmp_path, **keys))
    try:
        with (
            serve_in_thread(create_app(service)) as url,
            httpx.Client(base_url=url, timeout=30, headers=auth()) as client,
        ):
            status = client.get("/v1/status").json()
            plan = client.post("/v1/plans", json={"size_gb": 10}).json()["plan"]
    finally:
        service.manager.close()
        service.close()
    assert status["guard"] == expected
    word = "on" if expected["enabled"] else "off"
    assert [note for note in plan["notes"] if note.startswith(f"startup guard {word}")]
