"""``storage`` and ``hicache`` from the chat core to a real agent on the simulated SGLang 0.5.23
(subprocesses) and a real SQLite store: live with no restart, watched to ready, recorded; a
change that would need a restart is answered with the agent's reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.chat.policy import Actor
from bot.chat.replies import OperationReply, ProblemReply
from bot.store import Store
from bot.vocab import EventPhase, OperationState
from tests.chat._core_fixtures import RecordingFrontEnd, chat_settings, migrated_store, running_core
from tests.chat.conftest import SMALL, RunningAgent, SimHost, write_agent_config

pytestmark = pytest.mark.slow

ANA, EVE = Actor("ana"), Actor("eve")
KEY = "chat-admin-key"
KEY_ENV = "KIMI_TEST_SGLANG_ADMIN"


class _KeyedAgent(RunningAgent):
    def env(self) -> dict[str, str]:
        return {**super().env(), KEY_ENV: KEY}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with migrated_store(tmp_path) as the_store:
        yield the_store


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[RunningAgent]:
    """An agent holding the admin key of a simulated 0.5.23 server started with it, serving."""
    host = SimHost(
        profile=SMALL,
        version="0.5.23",
        hicache=("--enable-hierarchical-cache", "--hicache-size", "8", "--admin-api-key", KEY),
        serving_ratio=None,
        headroom_gb=0,
        time_scale=0.01,
    )
    root = tmp_path / "kimi-01"
    config = write_agent_config(root, host)
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text.replace("\n\n[agent.env]", f'\nadmin_api_key_env = "{KEY_ENV}"\n\n[agent.env]'),
        encoding="utf-8",
    )
    running = _KeyedAgent(root=root, config=config)
    try:
        running.start()
        page = running.run_to_end({"kind": "restart", "actor": "setup"})
        assert page["state"] == OperationState.READY, page["events"][-3:]
        yield running
    finally:
        running.close()


def test_storage_attach_then_write_policy_run_live_and_are_recorded(
    agent: RunningAgent, store: Store
) -> None:
    """ana's 'storage attach file ...' and 'hicache write-policy write_back' each start a live
    operation, watched to ready through waiting_idle, recorded in the store; eve (no applier)
    is refused; the server's pid never changes."""
    front = RecordingFrontEnd()
    settings = chat_settings({"kimi-01": agent.url})
    with agent.http() as http:
        pid = http.get("/v1/status").json()["server"]["pid"]
    with running_core(settings, store, front) as core:
        refused = core.handle("storage attach file", EVE)
        assert not isinstance(refused, OperationReply)
        started = core.handle("storage attach file file_storage_path=/tmp/x", ANA)
        assert isinstance(started, OperationReply), started
        final = core.wait(started.watch, timeout_s=60)
        assert final is not None
        assert final.state is OperationState.READY
        policy = core.handle("hicache write-policy write_back", ANA)
        assert isinstance(policy, OperationReply), policy
        final = core.wait(policy.watch, timeout_s=60)
        assert final is not None
        assert final.state is OperationState.READY
    assert EventPhase.WAITING_IDLE in [view.phase for _, view in front.views]
    record = store.operation_by_agent_id("kimi-01", policy.operation.id)
    assert record is not None
    assert record.kind == "live"
    with agent.http() as http:
        status = http.get("/v1/status").json()
    assert status["server"]["pid"] == pid
    assert status["hicache_live"]["live"] == {
        "storage_backend": "file",
        "extra_config": '{"file_storage_path": "/tmp/x"}',
        "prefetch_policy": "timeout",
        "write_policy": "write_back",
    }
    assert status["hicache_live"]["command_line"] == status["hicache_live"]["live"]


def test_a_policy_with_no_storage_attached_runs_as_a_restart(
    agent: RunningAgent, store: Store
) -> None:
    """With no backend attached SGLang cannot change a policy live: the agent runs it as a
    reconfigure (the flag written, then a restart), watched to ready like any change."""
    front = RecordingFrontEnd()
    settings = chat_settings({"kimi-01": agent.url})
    with running_core(settings, store, front) as core:
        reply = core.handle("hicache prefetch-policy best_effort", ANA)
        assert isinstance(reply, OperationReply), reply
        assert reply.operation.kind.value == "reconfigure"
        assert reply.watch.title == "Reconfigure kimi-01"
        final = core.wait(reply.watch, timeout_s=60)
    assert final is not None
    assert final.state is OperationState.READY
    with agent.http() as http:
        status = http.get("/v1/status").json()
    assert status["hicache_live"]["live"]["prefetch_policy"] == "best_effort"
    assert "--hicache-storage-prefetch-policy" in status["config"]["command"]


def test_clear_with_no_backend_is_answered_with_the_reason(
    agent: RunningAgent, store: Store
) -> None:
    """'storage clear' with nothing attached is refused by the agent; no operation starts."""
    front = RecordingFrontEnd()
    settings = chat_settings({"kimi-01": agent.url})
    with running_core(settings, store, front) as core:
        reply = core.handle("storage clear", ANA)
    assert isinstance(reply, ProblemReply)
    assert "no storage backend is attached" in str(reply)
    with agent.http() as http:
        kinds = [op["kind"] for op in http.get("/v1/operations").json()["operations"]]
    assert kinds == ["restart"]
