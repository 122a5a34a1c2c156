"""The agent's state directory on a full disk: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored,
so a write past it fails with EFBIG as on a full disk) set on the running agent, then lifted.

A mounted tmpfs would need root; the limit needs nothing and refuses the same writes. While it
holds, a resize is refused with a clear error in the API answer and the agent's log, nothing is
recorded or half-recorded, the server runs on as it was; once lifted, the same agent runs the
resize to ready.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.vocab import OperationState
from tests.chaos._agent_rig import RATIO_2, AgentRig, replace_flag

# Real processes throughout: minutes under a load of 15 on 2 cores, still bounded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Smaller than one page of the state file's write-ahead log (4 KiB + its headers): the first
# write of any transaction fails.
_LIMIT_BYTES = 4096


def test_a_resize_on_a_full_disk_is_refused_clearly_and_changes_nothing(
    agent_rig: Callable[..., AgentRig],
) -> None:
    """With the state directory full, POST a resize: 503 naming the state file and the disk, the
    same line in the agent's log, no operation or revision recorded, the config files and the
    running server untouched, the state file intact; with room again the resize reaches ready."""
    rig = agent_rig("process", RATIO_2)
    old = rig.initial_argv
    new = replace_flag(old, "--hicache-ratio", "3")
    rig.start_server()
    agent = rig.start_agent()
    pid = rig.server_pid()
    starts = rig.starts()
    revisions = agent.http.get("/v1/revisions").json()["revisions"]
    files = {path: path.read_bytes() for path in rig.config_files()}

    agent.limit_file_size(_LIMIT_BYTES)
    response = agent.submit(kind="resize", ratio=3)
    assert response.status_code == 503, response.text
    detail = response.json()["detail"]
    assert "agent.sqlite3" in detail, detail
    assert "disk" in detail, detail
    assert "[SQL:" not in detail, f"the statement is no help to the reader: {detail}"

    agent.wait_log(detail)

    # Nothing changed: no operation, no revision, the files and the server as they were.
    assert agent.http.get("/v1/operations").json()["operations"] == []
    assert agent.http.get("/v1/revisions").json()["revisions"] == revisions
    assert {path: path.read_bytes() for path in rig.config_files()} == files
    status = agent.status()
    assert status["operation"] is None
    assert status["server"]["pid"] == pid
    assert status["server"]["health_code"] == 200
    assert rig.starts() == starts
    rig.check_files()

    agent.limit_file_size(None)
    response = agent.submit(kind="resize", ratio=3)
    assert response.status_code == 202, response.text
    op_id = response.json()["id"]
    final, events = agent.follow(op_id)
    assert final["state"] == OperationState.READY, events[-3:]
    assert rig.starts() == starts + 1
    rig.check(agent, op_id, known=(old, new))
    assert agent.stop() == 0


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
    assert rig.server_pid() == pid
    assert rig.server_info() is not None
    assert {path: path.read_bytes() for path in rig.config_files()} == files
    rig.check_files()
