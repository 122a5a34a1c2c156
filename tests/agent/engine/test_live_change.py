"""Live changes end to end: the agent's HTTP API, its engine and the simulated SGLang 0.5.23 (a
real subprocess) with HiCache's runtime API: no restart, the command line rewritten, a revision
of kind live, SGLang's refusals shown in its own words, a failed verify reverted."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from bot.agent.engine.live_change import state_of_command
from bot.agent.http.app import create_app
from bot.agent.service import AgentService, build_service
from bot.agent.sglang_client import AdminReply, LiveHiCache, ServerLoad, SGLangClient
from bot.planner import LiveChange
from bot.settings import Secret
from bot.vocab import LiveChangeKind
from tests.agent._api_helpers import serve_in_thread
from tests.agent._ops_fixtures import (
    Harness,
    free_port,
    harness_factory,
    sim_command,
    wait_final,
)

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

KEY = "live-admin-key"
TOKEN = {"Authorization": "Bearer t0ken"}
HICACHE = ["--enable-hierarchical-cache", "--hicache-size", "8"]


def _harness(
    harness_factory: Callable[..., Harness],
    server_key: str | None = KEY,
    agent_key: str | None = KEY,
    **agent: Any,
) -> Harness:
    flags = [*HICACHE, *(["--admin-api-key", server_key] if server_key else [])]
    harness = harness_factory(sim_command(free_port(), *flags), version="0.5.23", **agent)
    if agent_key is not None:
        harness.settings = dataclasses.replace(
            harness.settings, admin_api_key_env="SGL_ADMIN", admin_api_key=Secret(agent_key)
        )
    return harness


def _client(harness: Harness, key: str | None = KEY) -> SGLangClient:
    client = SGLangClient(
        harness.settings.server_url, timeout=5.0, admin_api_key=Secret(key) if key else None
    )
    harness.clients.append(client)
    return client


def _service(harness: Harness, sglang: Any) -> AgentService:
    control, state, _ = harness.parts()
    service = build_service(harness.settings, control=control, state=state, sglang=sglang)
    harness.managers.append(service.manager)
    return service


def _follow(http: httpx.Client, op_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    after = 0
    for _ in range(60):
        body = http.get(f"/v1/operations/{op_id}", params={"after": after, "wait": 5}).json()
        events += body["events"]
        after = body["last_seq"]
        if body["state"] in ("ready", "failed", "rolled_back"):
            return body["operation"], events
    pytest.fail(f"operation {op_id} did not end")


@pytest.fixture
def api(harness_factory: Callable[..., Harness]) -> Iterator[tuple[Harness, httpx.Client]]:
    """The simulated 0.5.23 server started with the admin key, and the agent's API over HTTP."""
    harness = _harness(harness_factory)
    harness.start_server()
    service = _service(harness, _client(harness))
    with (
        serve_in_thread(create_app(service)) as url,
        httpx.Client(base_url=url, headers=TOKEN, timeout=30) as http,
    ):
        yield harness, http


def _live(http: httpx.Client, change: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    response = http.post("/v1/live/operations", json={"actor": "ana", "change": change})
    assert response.status_code == 202, response.text
    return _follow(http, response.json()["id"])


def test_attach_policy_and_a_live_rollback_change_the_server_without_a_restart(
    api: tuple[Harness, httpx.Client],
) -> None:
    """A proposal says live with its wait; the attach and the write-policy change each go
    waiting_idle -> applying -> verifying -> ready on the same pid, show in status beside the
    command line, which says the same, with revisions of kind live; a rollback to the first
    revision is live too and takes both back."""
    harness, http = api
    pid = harness.parts()[0].status().main_pid
    first_argv = harness.parts()[0].read_command()
    proposal = http.post("/v1/live/plans", json={"kind": "storage_attach", "backend": "file"})
    assert proposal.status_code == 200, proposal.text
    assert proposal.json()["mode"] == "live"
    assert proposal.json()["expected_wait_s"] == pytest.approx(2 * 0.05)

    final, events = _live(http, {"kind": "storage_attach", "backend": "file"})
    assert final["state"] == "ready", events
    phases = [event["phase"] for event in events]
    assert phases == ["planned", "waiting_idle", "applying", "verifying", "ready"]
    assert "live, no restart" in final["outcome"]
    control = harness.parts()[0]
    assert control.status().main_pid == pid
    assert state_of_command(control.read_command()).backend == "file"
    status = http.get("/v1/status").json()
    assert status["hicache_live"]["live"]["storage_backend"] == "file"
    assert status["hicache_live"]["command_line"]["storage_backend"] == "file"

    final, _ = _live(http, {"kind": "write_policy", "policy": "write_back"})
    assert final["state"] == "ready"
    assert "--hicache-write-policy" in control.read_command()
    revisions = http.get("/v1/revisions").json()["revisions"]
    assert [r["kind"] for r in revisions] == ["live", "live", "observed"]
    assert [r["outcome"] for r in revisions[:2]] == ["ready", "ready"]

    back = http.post(
        "/v1/operations",
        json={"kind": "rollback", "actor": "ana", "revision": revisions[-1]["id"]},
    )
    assert back.status_code == 202, back.text
    final, events = _follow(http, back.json()["id"])
    assert final["state"] == "ready", events
    assert final["kind"] == "live"
    assert control.status().main_pid == pid
    shown = _client(harness).storage_status().live
    assert shown == LiveHiCache(None, None, "timeout", "write_through")
    assert control.read_command() == first_argv
    # The server's admin key is on its command line, never in what the agent answers.
    for body in (http.get("/v1/status").text, http.get("/v1/revisions").text):
        assert KEY not in body
        assert "<redacted>" in body


def test_a_restart_after_a_live_attach_keeps_it(api: tuple[Harness, httpx.Client]) -> None:
    """The simulator forgets live changes at restart; the rewritten command line brings the
    attached backend back."""
    harness, http = api
    final, _ = _live(http, {"kind": "storage_attach", "backend": "file"})
    assert final["state"] == "ready"
    pid = harness.parts()[0].status().main_pid
    restart = http.post("/v1/operations", json={"kind": "restart", "actor": "ana"})
    final, events = _follow(http, restart.json()["id"])
    assert final["state"] == "ready", events[-3:]
    assert harness.parts()[0].status().main_pid != pid
    shown = _client(harness).storage_status().live
    assert shown is not None
    assert shown.storage_backend == "file"


def test_a_change_while_a_request_runs_waits_then_gives_up_changing_nothing(
    harness_factory: Callable[..., Harness],
) -> None:
    """With a /generate running longer than the idle timeout, the operation fails saying what
    runs, and the server and its command line are as before."""
    harness = _harness(
        harness_factory, live_idle_timeout_s=0.5, extra_env={"KIMI_SIM_GENERATE_S": "4"}
    )
    harness.start_server()
    client = _client(harness)
    service = _service(harness, client)
    argv = harness.parts()[0].read_command()
    url = harness.settings.server_url
    busy = threading.Thread(target=lambda: httpx.post(f"{url}/generate", json={"text": "x"}))
    busy.start()
    while (load := client.load()) is not None and load.idle:
        time.sleep(0.02)
    with (
        serve_in_thread(create_app(service)) as agent,
        httpx.Client(base_url=agent, headers=TOKEN, timeout=30) as http,
    ):
        final, _ = _live(http, {"kind": "storage_attach", "backend": "file"})
    busy.join()
    assert final["state"] == "failed"
    assert "not idle within 0.5 s (1 running, 0 queued); nothing was changed" in final["outcome"]
    assert harness.parts()[0].read_command() == argv
    assert client.storage_status().live == LiveHiCache(None, None, "timeout", "write_through")


class _BlindLoad:
    """The real client, but its load always idle: the request reaches SGLang while busy."""

    def __init__(self, real: SGLangClient) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def load(self) -> ServerLoad:
        return ServerLoad(0, 0, 1)


def test_sglangs_refusal_while_busy_is_shown_in_its_own_words_and_changes_nothing(
    harness_factory: Callable[..., Harness],
) -> None:
    """When the attach reaches the server while a request runs, SGLang's "Reject attach" is the
    operation's outcome, the revision failed, the command line untouched."""
    harness = _harness(harness_factory, extra_env={"KIMI_SIM_GENERATE_S": "4"})
    harness.start_server()
    client = _client(harness)
    manager = _service(harness, _BlindLoad(client)).manager
    argv = harness.parts()[0].read_command()
    url = harness.settings.server_url
    busy = threading.Thread(target=lambda: httpx.post(f"{url}/generate", json={"text": "x"}))
    busy.start()
    while (load := client.load()) is not None and load.idle:
        time.sleep(0.02)
    view = manager.submit_live(LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="file"), "ana")
    final = wait_final(manager, view.id)
    busy.join()
    assert final.state.value == "failed"
    assert final.outcome == (
        "SGLang refused PUT /hicache/storage-backend (file): Failed to attach HiCache storage "
        "backend.\nReject attach: scheduler is not idle. #queue-req=0 #running-req=1; "
        "nothing was changed"
    )
    assert manager.revisions()[0].outcome.value == "failed"
    assert harness.parts()[0].read_command() == argv


@pytest.mark.parametrize(
    ("server_key", "agent_key", "why"),
    [
        (KEY, "another-key", "the agent's admin key is not the server's --admin-api-key"),
        (None, KEY, "the server was started without --admin-api-key"),
        (KEY, None, "the agent holds no admin key"),
    ],
)
def test_without_the_servers_admin_key_a_change_needs_a_restart_and_runs_as_one(
    harness_factory: Callable[..., Harness],
    server_key: str | None,
    agent_key: str | None,
    why: str,
) -> None:
    """A wrong, missing or unheld admin key makes the plan say restart with the reason; the
    change then runs as a reconfigure (a restart on the rewritten command line), never live."""
    harness = _harness(harness_factory, server_key=server_key, agent_key=agent_key)
    harness.start_server()
    pid = harness.parts()[0].status().main_pid
    service = _service(harness, _client(harness, agent_key))
    with (
        serve_in_thread(create_app(service)) as url,
        httpx.Client(base_url=url, headers=TOKEN, timeout=30) as http,
    ):
        plan = http.post("/v1/live/plans", json={"kind": "storage_attach", "backend": "file"})
        assert plan.json()["mode"] == "restart"
        assert why in plan.json()["reason"]
        final, _ = _live(http, {"kind": "storage_attach", "backend": "file"})
        assert final["kind"] == "reconfigure"
        assert final["state"] == "ready"
        kinds = [op["kind"] for op in http.get("/v1/operations").json()["operations"]]
        assert kinds == ["reconfigure"]
    assert harness.parts()[0].status().main_pid != pid


def test_a_refused_change_records_nothing(harness_factory: Callable[..., Harness]) -> None:
    """A detach with no backend attached is refused (422) before anything is recorded, not
    even the running config (it was, before the decision came first)."""
    harness = _harness(harness_factory)
    harness.start_server()
    service = _service(harness, _client(harness))
    with (
        serve_in_thread(create_app(service)) as url,
        httpx.Client(base_url=url, headers=TOKEN, timeout=30) as http,
    ):
        refused = http.post(
            "/v1/live/operations", json={"actor": "ana", "change": {"kind": "storage_detach"}}
        )
        assert refused.status_code == 422
        assert "no storage backend is attached" in refused.json()["detail"]
        assert http.get("/v1/operations").json()["operations"] == []
        assert http.get("/v1/revisions").json()["revisions"] == []


class _LyingVerify:
    """The real client, but the first GET after an attach shows another prefetch policy."""

    def __init__(self, real: SGLangClient) -> None:
        self.real = real
        self.attached = False
        self.lied = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def attach_storage(self, *args: Any) -> AdminReply:
        self.attached = True
        return self.real.attach_storage(*args)

    def storage_status(self) -> AdminReply:
        reply = self.real.storage_status()
        if self.attached and not self.lied and reply.live is not None:
            self.lied = True
            shown = dataclasses.replace(reply.live, prefetch_policy="best_effort")
            return dataclasses.replace(reply, live=shown)
        return reply


def test_a_failed_verify_reverts_the_live_change(
    harness_factory: Callable[..., Harness],
) -> None:
    """SGLang accepts the attach but GET does not show what was asked: the agent detaches
    again, the operation fails saying what it saw, the command line is as before."""
    harness = _harness(harness_factory)
    harness.start_server()
    client = _client(harness)
    manager = _service(harness, _LyingVerify(client)).manager
    argv = harness.parts()[0].read_command()
    view = manager.submit_live(LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="file"), "ana")
    final = wait_final(manager, view.id)
    assert final.state.value == "failed"
    assert "reverted to" in (final.outcome or "")
    assert client.storage_status().live == LiveHiCache(None, None, "timeout", "write_through")
    assert harness.parts()[0].read_command() == argv


def test_on_an_older_server_a_storage_attach_restarts_with_the_flag_and_rolls_nothing_live(
    harness_factory: Callable[..., Harness],
) -> None:
    """SGLang 0.5.9 has no runtime API: the plan says restart and why, the change runs as a
    reconfigure (a restart on the rewritten command line) and the new server runs the backend;
    kind live or reconfigure through /v1/operations is refused."""
    harness = harness_factory(sim_command(free_port(), *HICACHE), version="0.5.9")
    harness.settings = dataclasses.replace(
        harness.settings, admin_api_key_env="SGL_ADMIN", admin_api_key=Secret(KEY)
    )
    harness.start_server()
    control = harness.parts()[0]
    pid = control.status().main_pid
    service = _service(harness, _client(harness))
    with (
        serve_in_thread(create_app(service)) as url,
        httpx.Client(base_url=url, headers=TOKEN, timeout=30) as http,
    ):
        plan = http.post("/v1/live/plans", json={"kind": "storage_attach", "backend": "file"})
        assert plan.json()["mode"] == "restart"
        assert "SGLang 0.5.9 has no HiCache runtime API" in plan.json()["reason"]
        for kind in ("live", "reconfigure"):
            wrong = http.post("/v1/operations", json={"kind": kind, "actor": "ana"})
            assert wrong.status_code == 422, wrong.text
        final, events = _live(http, {"kind": "storage_attach", "backend": "file"})
        assert final["kind"] == "reconfigure"
        assert final["state"] == "ready", events[-3:]
        assert "stopping" in [event["phase"] for event in events]
        cleared = http.post(
            "/v1/live/operations", json={"actor": "ana", "change": {"kind": "storage_clear"}}
        )
        assert cleared.status_code == 422
    assert control.status().main_pid != pid
    assert state_of_command(control.read_command()).backend == "file"
    info = httpx.get(f"{harness.settings.server_url}/server_info").json()
    assert info["hicache_storage_backend"] == "file"
