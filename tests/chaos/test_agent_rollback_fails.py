"""The simulated server crashes on every start from some moment on (its weights unreadable:
``KIMI_SIM_FAIL=crash_loading``, set after the first server came up): a resize applied from
Slack crashes on start, its automatic rollback's start crashes too, and the operation stops
there. The agent says so with the failure kind and both causes and starts nothing more; the
proposal's Slack message ends FAILED with those words, the store agrees, and the agent still
answers and takes the next operation."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.vocab import EventPhase, FailureKind, OperationState
from tests.chaos._agent_rig import replace_flag
from tests.chaos._agreement import check_agreement
from tests.chaos._bot_driver import proposal_id
from tests.chaos._host_bot import host_bot_rig
from tests.slack._harness import ANA, BEN, text_of

# Real processes throughout: minutes under a load of 15 on 2 cores, still bounded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Long enough for a retry to show: a small-profile start logs its server_args= line within a
# second here.
_QUIET_S = 5


@pytest.mark.parametrize("backend", ["process", pytest.param("systemd", marks=pytest.mark.long)])
def test_a_start_and_its_rollback_both_crash_the_operation_stops_without_a_retry(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resize ratio 2 -> 3 from Slack when every start crashes: failed (kind crash) after
    exactly two starts, the resize's and the rollback's, the final event and the Slack message
    naming both failures and no retry; no start follows, the status answers, and the next
    resize is taken and fails the same way; store, agent and Slack agree on both."""
    with host_bot_rig(tmp_path, monkeypatch, backend) as rig:
        old = rig.host.command_on_disk()
        new = replace_flag(old, "--hicache-ratio", "3")
        rig.host.set_server_env({"KIMI_SIM_FAIL": "crash_loading"})
        agent = rig.restart_agent()  # the process backend reads [agent.env] at start
        starts = rig.host.starts()
        rig.begin()

        posted = rig.propose(BEN, "resize ratio 3")
        rig.click_apply(proposal_id(posted), ANA)
        shown = text_of(rig.wait_message(posted.ts, "*FAILED*", timeout_s=180))
        assert f"*FAILED* ({FailureKind.CRASH})" in shown, shown
        assert "the rollback failed too" in shown, shown
        assert "not retrying" in shown, shown

        (operation,) = rig.agent_operations()
        final, events = agent.follow(operation["id"])
        phases = [event["phase"] for event in events]
        assert final["state"] == OperationState.FAILED, phases
        failure = final["operation"]["failure"]
        assert failure["kind"] == FailureKind.CRASH, failure
        assert phases.count(EventPhase.ROLLING_BACK) == 1, phases
        assert phases.count(EventPhase.STARTING) == 2, phases
        last = events[-1]
        assert "the rollback failed too" in last["message"], last["message"]
        assert last["data"]["kind"] == FailureKind.CRASH, last["data"]
        assert last["data"]["cause"]["kind"] == FailureKind.CRASH, last["data"]
        assert "SafetensorError" in rig.host.log_text()
        assert rig.host.starts() == starts + 2, f"{rig.host.starts() - starts} starts, not two"

        # Nothing more happens: no event, no start.
        quiet = agent.http.get(
            f"/v1/operations/{operation['id']}", params={"after": last["seq"], "wait": _QUIET_S}
        ).json()
        assert quiet["events"] == []
        assert rig.host.starts() == starts + 2, "the agent started the server again on its own"

        # The agent stays usable: it answers, holds no operation, and takes the next resize (by
        # size: no start logged its device pool since, so a ratio has nothing to multiply),
        # which fails the same way, once each.
        status = agent.status()
        assert status["operation"] is None
        assert status["server"]["state"] != "running"
        again = rig.propose(BEN, "resize size 10")
        rig.click_apply(proposal_id(again), ANA)
        shown = text_of(rig.wait_message(again.ts, "*FAILED*", timeout_s=180))
        assert f"*FAILED* ({FailureKind.CRASH})" in shown, shown
        assert rig.host.starts() == starts + 4

        ended = check_agreement(rig)
        assert [op["state"] for op in ended] == [OperationState.FAILED] * 2
        rig.host.check(agent, operation["id"], known=(old, new))
        assert rig.host.command_on_disk() == old, "the rollback's config is the next start's"
        assert agent.stop() == 0
