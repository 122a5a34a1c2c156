"""The simulated server crashes on every start from some moment on (its weights unreadable:
``KIMI_SIM_FAIL=crash_loading``, set after the first server came up): a resize's start crashes,
its automatic rollback's start crashes too, and the operation stops there, says so with the
failure kind and both causes, starts nothing more, and the agent still answers and takes the
next operation."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.vocab import EventPhase, FailureKind, OperationState
from tests.chaos._agent_rig import RATIO_2, AgentRig, replace_flag

# Real processes throughout: minutes under a load of 15 on 2 cores, still bounded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Long enough for a retry to show: a small-profile start logs its server_args= line within a
# second here.
_QUIET_S = 5


@pytest.mark.parametrize("backend", ["process", pytest.param("systemd", marks=pytest.mark.long)])
def test_a_start_and_its_rollback_both_crash_the_operation_stops_without_a_retry(
    backend: str, agent_rig: Callable[..., AgentRig]
) -> None:
    """Resize ratio 2 -> 3 when every start crashes: failed (kind crash) after exactly two
    starts, the resize's and the rollback's, the final event naming both failures and no retry;
    no start follows, the status answers, and the next resize is taken and fails the same way."""
    rig = agent_rig(backend, RATIO_2)
    old = rig.initial_argv
    new = replace_flag(old, "--hicache-ratio", "3")
    rig.start_server()
    rig.set_server_env({"KIMI_SIM_FAIL": "crash_loading"})
    starts = rig.starts()
    agent = rig.start_agent()

    response = agent.submit(kind="resize", ratio=3)
    assert response.status_code == 202, response.text
    op_id = response.json()["id"]
    final, events = agent.follow(op_id)
    phases = [event["phase"] for event in events]
    assert final["state"] == OperationState.FAILED, phases
    failure = final["operation"]["failure"]
    assert failure["kind"] == FailureKind.CRASH, failure
    assert phases.count(EventPhase.ROLLING_BACK) == 1, phases
    assert phases.count(EventPhase.STARTING) == 2, phases
    last = events[-1]
    assert "the rollback failed too" in last["message"], last["message"]
    assert "not retrying" in last["message"], last["message"]
    assert last["data"]["kind"] == FailureKind.CRASH, last["data"]
    assert last["data"]["cause"]["kind"] == FailureKind.CRASH, last["data"]
    assert "SafetensorError" in rig.log_text()
    assert rig.starts() == starts + 2, f"{rig.starts() - starts} starts, not the resize's and one"

    # Nothing more happens: no event, no start.
    quiet = agent.http.get(
        f"/v1/operations/{op_id}", params={"after": last["seq"], "wait": _QUIET_S}
    ).json()
    assert quiet["events"] == []
    assert rig.starts() == starts + 2, "the agent started the server again on its own"

    # The agent stays usable: it answers, holds no operation, and takes the next resize (by
    # size: no start logged its device pool since, so a ratio has nothing to multiply), which
    # fails the same way, once each.
    status = agent.status()
    assert status["operation"] is None
    assert status["server"]["state"] != "running"
    response = agent.submit(kind="resize", size_gb=10)
    assert response.status_code == 202, response.text
    again, _ = agent.follow(response.json()["id"])
    assert again["state"] == OperationState.FAILED
    assert again["operation"]["failure"]["kind"] == FailureKind.CRASH
    assert rig.starts() == starts + 4

    rig.check(agent, op_id, known=(old, new))
    assert rig.command_on_disk() == old, "the rollback's config is the one the next start runs"
    assert agent.stop() == 0
