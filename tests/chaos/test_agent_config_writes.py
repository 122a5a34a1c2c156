"""SIGKILL the agent while it writes the server's config, at every write point, during a resize
applied from Slack, and start it again: the file on disk is the old version or the new one,
never partial, the agent's status names the one it will run, the resize ends ready with the
server started once, and the proposal's Slack message ends READY with the store agreeing.

The kill is the agent's own test hook, ``KIMI_AGENT_CRASH_AT=<file>:<moment>`` (see
``bot.agent.write_hook``): the real process dies of SIGKILL in the middle of that write. The
write points are every file the backend writes the config and its start records to (the process
backend's ``command.json``, the copy it keeps as ``command.previous.json``, ``server.json``; the
systemd backend's drop-in, the kept previous drop-in and its start record) at each moment of the
replacement, and each kind of transaction on the agent's own state file, killed before its
commit. One point per file kind and backend runs in ``make test``; the rest are marked
``long``. Each backend's scenarios share one bot, stand-in and host (module-scoped); each
resize flips the server between ratio 2 and ratio 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.chaos._agent_rig import replace_flag
from tests.chaos._agreement import check_agreement
from tests.chaos._bot_driver import proposal_id
from tests.chaos._host_bot import HostBotRig, hicache_ratio, host_bot_rig
from tests.slack._harness import ANA, BEN, wait_ephemeral

# Real processes throughout: minutes under a load of 15 on 2 cores, still bounded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_MOMENTS = ("partial", "written", "renamed")
_LONG = pytest.mark.long
#: For make test: the command line and the server record at the process backend, the state
#: database between an event and its commit, the drop-in at systemd (the config each backend
#: runs, and the records the original resume bug hid in). Each costs 20-90 s of real processes,
#: so the other write points, the `.previous` copies and partial writes among them, run in
#: make test-long, which runs every point.
QUICK = {
    "command.json:written",
    "server.json:renamed",
    "agent.sqlite3/append_event:uncommitted",
    "50-kimi-ops-hicache.conf:written",
}
#: Killed before the operation's one transaction committed: the agent recorded nothing.
_NOTHING_RECORDED = "agent.sqlite3/record_operation:uncommitted"


def _points(files: tuple[str, ...]) -> list[object]:
    return [
        pytest.param(f"{name}:{moment}", marks=() if f"{name}:{moment}" in QUICK else _LONG)
        for name in files
        for moment in _MOMENTS
    ]


PROCESS_POINTS = [
    *_points(("command.previous.json", "command.json")),
    # server.json: the stop asked for, the start recorded before the spawn, its pid after it.
    *_points(("server.json",)),
    pytest.param("server.json:written#2", marks=_LONG),
    pytest.param("server.json:renamed#3", marks=_LONG),
    *(
        pytest.param(
            f"agent.sqlite3/{method}:uncommitted",
            marks=() if f"agent.sqlite3/{method}:uncommitted" in QUICK else _LONG,
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
    ("50-kimi-ops-hicache.conf.previous", "50-kimi-ops-hicache.conf", "50-kimi-ops-start.json")
)


@contextmanager
def _shared_host(factory: pytest.TempPathFactory, backend: str) -> Iterator[HostBotRig]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        host_bot_rig(factory.mktemp(backend), monkeypatch, backend) as rig,
    ):
        yield rig


@pytest.fixture(scope="module")
def process_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostBotRig]:
    """The bot on a process-backend host serving ratio 2, shared by the module's scenarios."""
    with _shared_host(tmp_path_factory, "process") as rig:
        yield rig


@pytest.fixture(scope="module")
def systemd_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostBotRig]:
    """The bot on a systemd-backend host (the stand-in systemctl) serving ratio 2, shared."""
    with _shared_host(tmp_path_factory, "systemd") as rig:
        yield rig


def _kill_mid_write_and_resume(rig: HostBotRig, crash_at: str) -> None:
    """Propose and apply from Slack a flip of the ratio (2 <-> 3) on an agent that kills itself
    at ``crash_at``; start a fresh agent; check the files after the kill and after the end, and
    the bot's agreement with the agent and Slack."""
    old = rig.host.command_on_disk()
    target = "3" if hicache_ratio(old) == "2" else "2"
    new = replace_flag(old, "--hicache-ratio", target)
    starts_before = rig.host.starts()
    doomed = rig.restart_agent(crash_at=crash_at)
    rig.begin()

    posted = rig.propose(BEN, f"resize ratio {target}")
    clicked = rig.click_apply(proposal_id(posted), ANA)
    code = doomed.wait_exit()
    assert code == -9, f"the agent was not killed at {crash_at} (exit {code}):\n{doomed.log()}"
    # Dead mid-write: the files parse and the command is one of the two versions.
    rig.host.check_files()
    assert rig.host.command_on_disk() in (old, new), rig.host.command_on_disk()

    agent = rig.restart_agent()
    if crash_at.startswith(_NOTHING_RECORDED):
        # The agent died before recording the operation, so it touched nothing: the bot, asking
        # it again once it answers, finds no operation, tells the clicker, and the resize is
        # proposed and applied again.
        assert "cannot be reached" in wait_ephemeral(rig.slack, clicked)
        assert rig.agent_operations() == []
        assert rig.host.command_on_disk() == old
        posted = rig.propose(BEN, f"resize ratio {target}")
        rig.click_apply(proposal_id(posted), ANA)
    rig.wait_message(posted.ts, "*READY*", timeout_s=240)
    (operation,) = check_agreement(rig)
    assert operation["state"] == "ready", operation
    assert rig.host.starts() == starts_before + 1, f"{rig.host.starts() - starts_before} starts"
    info = rig.host.server_info()
    assert info is not None
    assert info["hicache_ratio"] == float(target)
    rig.host.check(agent, operation["id"], known=(old, new))
    assert rig.host.command_on_disk() == new


@pytest.mark.parametrize("crash_at", PROCESS_POINTS)
def test_process_backend_killed_mid_write_resumes_and_the_message_ends_ready(
    crash_at: str, process_host: HostBotRig
) -> None:
    """Killed at ``crash_at`` during a resize applied from Slack on the process backend, the
    agent leaves the command and its records whole (old or new); a fresh agent finishes the
    resize with one start and the proposal's message ends READY, store and agent agreeing."""
    _kill_mid_write_and_resume(process_host, crash_at)


@pytest.mark.parametrize("crash_at", SYSTEMD_POINTS)
def test_systemd_backend_killed_mid_write_resumes_and_the_message_ends_ready(
    crash_at: str, systemd_host: HostBotRig
) -> None:
    """Killed at ``crash_at`` during a resize applied from Slack on the systemd backend (over
    the stand-in systemctl), the agent leaves the drop-in whole (absent, old or new); a fresh
    agent finishes the resize with one start and the message ends READY, all agreeing."""
    _kill_mid_write_and_resume(systemd_host, crash_at)
