"""An operation on a real full disk: the agent's state directory on a small tmpfs (this machine
runs the tests as root), filled while a resize is followed, then freed. The real simulator is the
server (process backend), with real SQLite state."""

from __future__ import annotations

import contextlib
import errno
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bot.agent.config import agent_settings_from_config
from bot.agent.engine.context import RunnerContext
from bot.agent.engine.manager import OperationManager
from bot.agent.engine.notices import Notices
from bot.agent.engine.state_writes import StateWrites
from bot.clock import SystemClock
from bot.errors import OperationConflict, StoreError
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

RATIO_2 = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache", "--hicache-ratio", "2")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs on the test's tmp dir, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            "the full-disk test mounts a small tmpfs and needs root (mount -t tmpfs): "
            f"{done.stderr.strip() or done.returncode}"
        )
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    """Write one file until the disk refuses more; returns it (delete it to free the disk)."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(chunk)
    with (
        pytest.raises(OSError, match="No space left") as refused,
        (disk / "probe").open("wb", buffering=0) as handle,
    ):
        handle.write(chunk)
    assert refused.value.errno == errno.ENOSPC
    return filler


def _wait(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)


def _phase_seen(manager: OperationManager, op_id: int, phase: str) -> bool:
    return any(e.phase == phase for e in manager.state.events(op_id))


def test_a_full_disk_mid_start_waits_and_finishes_once_there_is_room(
    harness_factory: Callable[..., Harness], small_disk: Path
) -> None:
    """The state directory's disk filled while the new server loads: the operation's thread
    lives on (the start followed in memory), status names the problem and the disk, a second
    request is refused as conflicting with a live operation; once the disk is freed the events
    kept in memory are written in order and the resize ends ready (failed before the fix: an
    uncaught StoreError ended the thread, the operation stayed running with nobody behind it
    and every later request got 409 until the agent was restarted)."""
    harness = harness_factory(
        sim_command(free_port(), *RATIO_2),
        time_scale="0.3",
        state_dir=str(small_disk / "agent"),
    )
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=4)
    _wait(lambda: _phase_seen(manager, op.id, "load_weights"), "weights loading")
    filler = _fill(small_disk)
    _wait(lambda: any("cannot record" in p for p in manager.problems()), "the problem in status")
    problem = next(p for p in manager.problems() if "cannot record" in p)
    assert f"operation {op.id}" in problem
    assert "full" in problem, problem
    time.sleep(3)  # the start goes on, followed in memory, past its HTTP phase
    assert not manager.get(op.id).finished
    assert not manager.join(op.id, 0.1), "the operation's thread ended with the disk full"
    with pytest.raises(OperationConflict):
        manager.submit("resize", actor="ben", ratio=3)
    filler.unlink()
    final = wait_final(manager, op.id, timeout_s=120)
    events = manager.state.events(op.id)
    assert final.state == "ready", events[-1].message
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    phases = [e.phase for e in events]
    for later in ("kv_pool", "host_pool", "http", "verifying", "ready"):
        assert phases.count(later) >= 1, phases
    assert manager.problems() == ()


def test_status_says_when_the_servers_log_is_on_the_refusing_disk(tmp_path: Path) -> None:
    """The server's log at its default, inside the state directory: the refused write's line
    in status says the log is on the same disk and names the setting that moves it; a log on
    another disk is not mentioned."""

    def line(log_file: str | None) -> str:
        section: dict[str, object] = {"command": ["python3", "-m", "sglang.launch_server"],
                                      "state_dir": str(tmp_path / "agent")}  # fmt: skip
        if log_file is not None:
            section["log_file"] = log_file
        settings = agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "t"})
        settings.state_dir.mkdir(exist_ok=True)
        notices = Notices()
        ctx = RunnerContext(settings=settings, control=None, probe=None, sglang=None,  # type: ignore[arg-type]
                            state=None, clock=SystemClock(), health_grace_s=1.0,  # type: ignore[arg-type]
                            notices=notices)  # fmt: skip
        StateWrites(ctx, 7).refused("its resume point", StoreError("database or disk is full"))
        (text,) = notices.lines()
        return text

    default = line(None)
    assert "operation 7 cannot record its resume point: database or disk is full" in default
    assert "server's own log" in default
    assert "[agent] log_file" in default
    assert "server's own log" not in line("/dev/shm/elsewhere.log")
