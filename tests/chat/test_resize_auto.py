"""``resize auto`` from the chat core to a real agent on the simulator (SGLang 0.5.23's dialect)
and back: the proposal shows the ratio SGLang will pick, and its apply writes neither flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.chat.policy import Actor
from bot.chat.replies import OperationReply, ProposalReply
from bot.store import Store
from bot.vocab import OperationState
from tests.chat._core_fixtures import RecordingFrontEnd, chat_settings, migrated_store, running_core
from tests.chat.conftest import SimHost, agent_on_sim

ANA, BEN = Actor("ana"), Actor("ben")


@pytest.mark.slow
def test_resize_auto_is_proposed_on_sglang_s_ratio_and_applied_without_flags(
    tmp_path: Path,
) -> None:
    """ben proposes auto on a 0.5.23 host serving ratio 2: the proposal reads "auto: ratio R
    (SGLang sizes it at start)"; ana applies it, the server reaches ready
    and its command carries neither --hicache-ratio nor --hicache-size; a ratio proposed then
    warns that it turns auto-sizing off."""
    host = SimHost(version="0.5.23")
    with agent_on_sim(tmp_path / "kimi-01", host) as agent, migrated_store(tmp_path) as store:
        assert isinstance(store, Store)
        front = RecordingFrontEnd()
        with running_core(chat_settings({"kimi-01": agent.url}), store, front) as core:
            proposal = core.handle("resize auto", BEN)
            assert isinstance(proposal, ProposalReply), proposal
            assert proposal.plan.fits, proposal.plan.reason
            assert proposal.plan.setting.startswith("auto: ratio ")
            assert proposal.plan.setting.endswith(" (SGLang sizes it at start)")
            assert proposal.plan.ratio is None
            assert proposal.plan.size_gb is None
            started = core.handle(f"apply {proposal.id}", ANA)
            assert isinstance(started, OperationReply), started
            final = core.wait(started.watch, timeout_s=120)
            assert final is not None
            assert final.state is OperationState.READY
            explicit = core.handle("resize ratio 1.5", BEN)
            assert isinstance(explicit, ProposalReply), explicit
            assert any(
                "writes --hicache-ratio, which turns SGLang's auto-sizing off" in warning
                for warning in explicit.plan.warnings
            ), explicit.plan.warnings
        with agent.http() as http:
            status = http.get("/v1/status").json()
        command = next(v["command"] for v in _mappings(status) if "command" in v)
        assert "--enable-hierarchical-cache" in command
        assert not [a for a in command if a.startswith(("--hicache-ratio", "--hicache-size"))]


def _mappings(value: object) -> list[dict[str, object]]:
    """Every mapping in a JSON value, outermost first."""
    if isinstance(value, dict):
        return [value, *(m for v in value.values() for m in _mappings(v))]
    if isinstance(value, list):
        return [m for v in value for m in _mappings(v)]
    return []
