"""The agent's state directory on a full disk: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored,
so a write past it fails with EFBIG as on a full disk) set on the running agent, then lifted.

A mounted tmpfs would need root; the limit needs nothing and refuses the same writes. While it
holds, a resize applied from Slack is refused with a clear error, shown to the clicker and
written in the agent's log; nothing is recorded or half-recorded at the agent or in the bot's
store, the server runs on as it was; once lifted, the same agent runs the next proposal's resize
to ready and its message ends READY.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bot.store import RevisionOutcome
from bot.vocab import OperationState
from tests.chaos._agent_rig import RATIO_2, AgentRig, replace_flag
from tests.chaos._agreement import check_agreement
from tests.chaos._bot_driver import proposal_id
from tests.chaos._host_bot import host_bot_rig
from tests.slack._harness import ANA, BEN, wait_ephemeral

# Real processes throughout: minutes under a load of 15 on 2 cores, still bounded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Smaller than one page of the state file's write-ahead log (4 KiB + its headers): the first
# write of any transaction fails.
_LIMIT_BYTES = 4096


def test_a_resize_on_a_full_disk_is_refused_clearly_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the state directory full, Apply a resize from Slack: the clicker is told the
    agent's 503 naming the state file and the disk, the same line is in the agent's log, no
    operation or revision is recorded at the agent or the bot, the proposal is settled refused,
    the config files and the running server untouched, the state file intact; with room again
    the next proposal's resize reaches ready and store, agent and Slack agree."""
    with host_bot_rig(tmp_path, monkeypatch, "process") as rig:
        agent = rig.agent
        old = rig.host.command_on_disk()
        new = replace_flag(old, "--hicache-ratio", "3")
        pid = rig.host.server_pid()
        starts = rig.host.starts()
        revisions = agent.http.get("/v1/revisions").json()["revisions"]
        files = {path: path.read_bytes() for path in rig.host.config_files()}
        rig.begin()

        posted = rig.propose(BEN, "resize ratio 3")
        agent.limit_file_size(_LIMIT_BYTES)
        told = wait_ephemeral(rig.slack, rig.click_apply(proposal_id(posted), ANA))
        assert "(503)" in told, told
        assert "agent.sqlite3" in told, told
        assert "disk" in told, told
        assert "[SQL:" not in told, f"the statement is no help to the reader: {told}"
        detail = told.split("(503): ", 1)[1]
        agent.wait_log(detail)

        # Nothing changed: no operation, no revision, the files and the server as they were.
        assert rig.agent_operations() == []
        assert agent.http.get("/v1/revisions").json()["revisions"] == revisions
        _unchanged(rig.host, files, pid, starts)
        status = agent.status()
        assert status["operation"] is None
        assert status["server"]["health_code"] == 200
        proposal = rig.store.proposal(proposal_id(posted))
        assert rig.store.revision(proposal.revision_id).outcome is RevisionOutcome.REFUSED
        assert check_agreement(rig) == []

        agent.limit_file_size(None)
        posted = rig.propose(BEN, "resize ratio 3")
        rig.click_apply(proposal_id(posted), ANA)
        rig.wait_message(posted.ts, "*READY*", timeout_s=180)
        (operation,) = check_agreement(rig)
        assert operation["state"] == OperationState.READY
        assert rig.host.starts() == starts + 1
        rig.host.check(agent, operation["id"], known=(old, new))
        assert rig.host.command_on_disk() == new
        assert agent.stop() == 0


def _unchanged(host: AgentRig, files: dict[Path, bytes], pid: int | None, starts: int) -> None:
    """The config files hold the same bytes, the same server runs, none started, state intact."""
    assert {path: path.read_bytes() for path in host.config_files()} == files
    assert host.server_pid() == pid
    assert host.starts() == starts
    host.check_files()


@pytest.mark.long
def test_an_agent_started_on_a_full_disk_says_so_and_leaves_the_server_running(
    agent_rig: Callable[..., AgentRig],
) -> None:
    """Started with the same limit, the agent cannot open its state file: it exits 1 with one
    line naming the file and the full disk (no traceback), and the server runs on untouched."""
    rig = agent_rig("process", RATIO_2)
    rig.start_server()
    rig.start_agent().stop()  # the state file exists, as on a host where the agent ran before
    pid = rig.server_pid()
    files = {path: path.read_bytes() for path in rig.config_files()}

    agent = rig.start_agent(file_size_limit=_LIMIT_BYTES, wait_ready=False)
    assert agent.wait_exit() == 1, agent.log()
    log = agent.log()
    assert "agent.sqlite3" in log, log
    assert "the disk holding it is full" in log, log
    assert "Traceback" not in log, log
    _unchanged(rig, files, pid, rig.starts())
    assert rig.server_info() is not None
