"""SIGKILL the agent while it writes the server's config, at every write point, and start it
again: the file on disk is the old version or the new one, never partial, the agent's status
names the one it will run, and the resize ends ready with the server started once.

The kill is the agent's own test hook, ``KIMI_AGENT_CRASH_AT=<file>:<moment>`` (see
``bot.agent.write_hook``): the real process dies of SIGKILL in the middle of that write. The
write points are every file the backend writes the config and its start records to (the process
backend's ``command.json``, the copy it keeps as ``command.previous.json``, ``server.json``; the
systemd backend's drop-in, the kept previous drop-in and its start record) at each moment of the
replacement, and each kind of transaction on the agent's own state file, killed before its
commit. Two run in ``make test`` (the command mid-rename, an event's transaction); the rest are
marked ``long``.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.chaos._agent_rig import RATIO_2, AgentRig, replace_flag

# Real processes throughout: minutes under a load of 15 on 2 cores, still bounded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_MOMENTS = ("partial", "written", "renamed")
_LONG = pytest.mark.long


def _points(files: tuple[str, ...], quick: set[str]) -> list[object]:
    return [
        pytest.param(f"{name}:{moment}", marks=() if f"{name}:{moment}" in quick else _LONG)
        for name in files
        for moment in _MOMENTS
    ]


PROCESS_POINTS = [
    *_points(("command.previous.json", "command.json"), {"command.json:written"}),
    # server.json: the stop asked for, the start recorded before the spawn, its pid after it.
    *_points(("server.json",), set()),
    pytest.param("server.json:written#2", marks=_LONG),
    pytest.param("server.json:renamed#3", marks=_LONG),
    *(
        pytest.param(
            f"agent.sqlite3/{method}:uncommitted",
            marks=() if method == "append_event" else _LONG,
        )
        for method in (
            "record_operation",
            "save_resume_point",
            "append_event",
            "update_revision",
            "update_operation",
        )
    ),
    pytest.param("agent.sqlite3/record_operation:committed", marks=_LONG),
]
SYSTEMD_POINTS = _points(
    ("50-kimi-ops-hicache.conf.previous", "50-kimi-ops-hicache.conf", "50-kimi-ops-start.json"),
    set(),  # each takes minutes: the stand-in systemctl is a Python process per call
)


def _kill_and_resume(rig: AgentRig, crash_at: str) -> None:
    """Resize ratio 2 -> 3 on an agent that kills itself at ``crash_at``, then finish it on a
    fresh agent; check the files after the kill and after the end."""
    old = rig.initial_argv
    new = replace_flag(old, "--hicache-ratio", "3")
    assert old != new, "the resize must change the command line"
    rig.start_server()
    starts_before = rig.starts()

    first = rig.start_agent(crash_at=crash_at)
    try:
        response = first.submit(kind="resize", ratio=3)
        assert response.status_code == 202, response.text
    except httpx.TransportError:
        pass  # killed while the request was being answered
    code = first.wait_exit()
    assert code == -9, f"the agent was not killed at {crash_at} (exit {code}):\n{first.log()}"
    # Dead mid-write: the files parse and the command is one of the two versions.
    rig.check_files()
    assert rig.command_on_disk() in (old, new), rig.command_on_disk()

    second = rig.start_agent()
    operations = second.http.get("/v1/operations").json()["operations"]
    if not operations:
        # Killed before the operation's one transaction committed: nothing was recorded, so
        # nothing was touched; asked again, the resize runs.
        assert crash_at.startswith("agent.sqlite3/record_operation:uncommitted"), crash_at
        assert rig.command_on_disk() == old
        response = second.submit(kind="resize", ratio=3)
        assert response.status_code == 202, response.text
        operations = [response.json()["operation"]]
    op_id = operations[0]["id"]
    final, events = second.follow(op_id)
    assert final["state"] == "ready", events[-3:]
    assert rig.starts() == starts_before + 1, f"started {rig.starts() - starts_before} times"
    info = rig.server_info()
    assert info is not None
    assert info["hicache_ratio"] == 3
    rig.check(second, op_id, known=(old, new))
    assert rig.command_on_disk() == new
    assert second.stop() == 0


@pytest.mark.parametrize("crash_at", PROCESS_POINTS)
def test_process_backend_killed_mid_write_resumes_on_the_old_or_new_command(
    crash_at: str, agent_rig: Callable[..., AgentRig]
) -> None:
    """Killed at ``crash_at`` during a resize on the process backend, the agent leaves the
    command and its records whole (old or new), and a fresh agent finishes the resize with one
    start."""
    _kill_and_resume(agent_rig("process", RATIO_2), crash_at)


@pytest.mark.parametrize("crash_at", SYSTEMD_POINTS)
def test_systemd_backend_killed_mid_write_resumes_on_the_old_or_new_drop_in(
    crash_at: str, agent_rig: Callable[..., AgentRig]
) -> None:
    """Killed at ``crash_at`` during a resize on the systemd backend (over the stand-in
    systemctl), the agent leaves the drop-in whole (absent, old or new), and a fresh agent
    finishes the resize with one start."""
    _kill_and_resume(agent_rig("systemd", RATIO_2), crash_at)
