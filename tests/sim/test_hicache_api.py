"""The simulator's HiCache runtime API (SGLang 0.5.23), driven by the agent's own SGLangClient
against a real simulator subprocess: the admin key, the idle rule, the restart that forgets."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest

from bot.agent.sglang_client import LiveHiCache, SGLangClient
from bot.settings import Secret
from tests.sim.conftest import Sim

READY = "The server is fired up and ready to roll!"
KEY = "admin-key-for-tests"
ARGS = [
    "--model-path", "/models/kimi", "--tp", "2", "--host", "127.0.0.1", "--port", "0",
    "--enable-hierarchical-cache", "--hicache-size", "8",
]  # fmt: skip


def _serving(
    run_sim: Callable[..., Sim], env: dict[str, str], *extra: str, **more_env: str
) -> tuple[Sim, str]:
    sim = run_sim([*ARGS, *extra], dict(env, KIMI_SIM_VERSION="0.5.23", **more_env))
    sim.wait_for(READY)
    return sim, f"http://127.0.0.1:{sim.port()}"


def _live(client: SGLangClient) -> LiveHiCache:
    reply = client.storage_status()
    assert reply.ok, reply
    assert reply.live is not None
    return reply.live


@pytest.mark.slow
def test_attach_change_policy_and_detach_each_show_in_get_and_a_restart_forgets_them(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """A live attach, a policy change and a detach each show in GET; a restart comes back with
    only what its command line says."""
    sim, base = _serving(run_sim, sim_env, "--admin-api-key", KEY)
    with SGLangClient(base, admin_api_key=Secret(KEY)) as client:
        assert _live(client) == LiveHiCache(None, None, "timeout", "write_through")
        attached = client.attach_storage("file", '{"prefetch_threshold": 64}', "best_effort")
        assert attached.ok, attached
        assert attached.message.startswith("HiCache storage backend attached.")
        assert _live(client) == LiveHiCache(
            "file", '{"prefetch_threshold": 64}', "best_effort", "write_through"
        )
        policy = client.attach_storage("file", write_policy="write_back")
        assert "policies updated" in policy.message
        assert _live(client).write_policy == "write_back"
        other = client.attach_storage("mooncake")
        assert other.status_code == 400
        assert "Detach first." in other.message
        assert client.detach_storage().ok
        assert _live(client).storage_backend is None
        assert client.attach_storage("file").ok
    assert sim.terminate() == 0
    again, base = _serving(run_sim, sim_env, "--admin-api-key", KEY)
    with SGLangClient(base, admin_api_key=Secret(KEY)) as client:
        assert _live(client) == LiveHiCache(None, None, "timeout", "write_through")
    assert again.terminate() == 0


@pytest.mark.slow
def test_a_wrong_admin_key_and_a_server_without_one_are_refused_with_sglangs_words(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """A wrong key gets 401 Unauthorized and changes nothing; without --admin-api-key every
    route answers SGLang's "requires admin API key" sentence."""
    sim, base = _serving(run_sim, sim_env, "--admin-api-key", KEY)
    with SGLangClient(base, admin_api_key=Secret("not-the-key")) as wrong:
        refused = wrong.attach_storage("file")
        assert (refused.status_code, refused.message) == (401, "Unauthorized")
    with SGLangClient(base, admin_api_key=Secret(KEY)) as client:
        assert _live(client).storage_backend is None
    sim.terminate()
    bare, base = _serving(run_sim, sim_env)
    with SGLangClient(base) as client:
        for reply in (client.storage_status(), client.attach_storage("file")):
            assert reply.status_code == 400
            assert "Restart with --admin-api-key to enable." in reply.message
    bare.terminate()


@pytest.mark.slow
def test_attach_and_detach_are_refused_while_a_request_runs_and_load_counts_it(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """While a /generate runs, /v1/loads counts it and attach is refused with the scheduler's
    words, nothing changed; once it ended the same attach is accepted."""
    sim, base = _serving(run_sim, sim_env, "--admin-api-key", KEY, KIMI_SIM_GENERATE_S="2")
    thread = threading.Thread(target=lambda: httpx.post(f"{base}/generate", json={"text": "x"}))
    with SGLangClient(base, admin_api_key=Secret(KEY)) as client:
        before = client.load()
        assert before is not None
        assert before.idle
        thread.start()
        deadline = time.monotonic() + 10
        while (load := client.load()) is not None and load.idle and time.monotonic() < deadline:
            time.sleep(0.02)
        assert load is not None
        assert load.running == 1
        refused = client.attach_storage("file")
        assert refused.status_code == 400
        assert refused.message == (
            "Failed to attach HiCache storage backend.\n"
            "Reject attach: scheduler is not idle. #queue-req=0 #running-req=1"
        )
        assert _live(client).storage_backend is None
        thread.join()
        assert client.attach_storage("file").ok
    sim.terminate()


@pytest.mark.slow
def test_older_servers_have_no_runtime_api_and_load_reads_get_load(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """SGLang 0.5.9 answers 404 to the runtime API; load() falls back to /get_load."""
    sim = run_sim([*ARGS, "--admin-api-key", KEY], dict(sim_env, KIMI_SIM_VERSION="0.5.9"))
    sim.wait_for(READY)
    with SGLangClient(f"http://127.0.0.1:{sim.port()}", admin_api_key=Secret(KEY)) as client:
        assert client.storage_status().status_code == 404
        load = client.load()
        assert load is not None
        assert (load.running, load.waiting, load.ranks) == (0, 0, 1)
    sim.terminate()


@pytest.mark.slow
def test_live_not_applied_answers_200_and_leaves_the_live_values(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """With KIMI_SIM_FAIL=live_not_applied an attach says it attached while GET shows none."""
    sim, base = _serving(run_sim, sim_env, "--admin-api-key", KEY, KIMI_SIM_FAIL="live_not_applied")
    with SGLangClient(base, admin_api_key=Secret(KEY)) as client:
        assert client.attach_storage("file").ok
        assert _live(client).storage_backend is None
    sim.terminate()
