"""The post-ready watch's turns with scripted parts: a probe whose RAM readings are scripted, a
server that serves or not, an operation that runs or not, and a fake clock."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.agent.control.protocol import ServerProcessState
from bot.agent.engine.post_ready import MemoryNoticeLog, PostReadyWatch
from bot.agent.host.probe import GpuFacts, ProcessInfo, RamFacts, ServerCgroup
from bot.errors import RamProbeError
from bot.vocab import ServerState

GB = 1e9
FLOOR = 10 * 1024**3
T0 = 1_770_000_000.0


class FakeClock:
    """Advances only when slept on."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> datetime:
        return datetime.fromtimestamp(T0 + self.t, UTC)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


@dataclass
class ScriptedProbe:
    """Available RAM in GB, one reading per call (a None raises RamProbeError)."""

    readings: list[float | None]
    calls: int = 0
    domains: list[ServerCgroup | None] = field(default_factory=list)

    def ram(self, server: ServerCgroup | None = None) -> RamFacts:
        self.domains.append(server)
        value = self.readings[self.calls]
        self.calls += 1
        if value is None:
            raise RamProbeError("cannot read /proc/meminfo")
        return RamFacts(total_bytes=int(60 * GB), available_bytes=int(value * GB))

    def gpus(self) -> GpuFacts:
        return GpuFacts(available=False, reason="none here")

    def process_tree_rss(self, pid: int) -> int:
        return 0

    def stray_server_processes(self, exclude_pids: Iterable[int]) -> list[ProcessInfo]:
        return []


@dataclass
class Server:
    """The server as control and SGLang client see it; ``commands`` records any write."""

    serving: bool = True
    commands: list[str] = field(default_factory=list)

    def status(self) -> ServerProcessState:
        state = ServerState.RUNNING if self.serving else ServerState.STOPPED
        return ServerProcessState(state, main_pid=4242 if self.serving else None)

    def health(self) -> int | None:
        return 200 if self.serving else None

    def cgroup(self) -> ServerCgroup:
        return ServerCgroup(pid=4242 if self.serving else None)

    def server_info(self) -> dict[str, Any] | None:
        return None

    def __getattr__(self, name: str) -> Any:
        # start, stop, write_command ...: the watch must call none of them.
        def record(*args: Any, **kwargs: Any) -> None:
            self.commands.append(name)

        return record


def make_watch(
    tmp_path: Path, readings: list[float | None], server: Server, running: list[bool]
) -> tuple[PostReadyWatch, FakeClock, ScriptedProbe]:
    clock = FakeClock()
    probe = ScriptedProbe(readings)
    watch = PostReadyWatch(
        probe,
        server,  # type: ignore[arg-type]
        server,
        lambda: running[0],
        clock,
        MemoryNoticeLog(tmp_path / "memory_notices.json"),
        FLOOR,
        interval_s=5.0,
        margin_bytes=1 * GB,
    )
    return watch, clock, probe


def run(watch: PostReadyWatch, clock: FakeClock, turns: int) -> list[int]:
    """``turns`` turns 5 s apart; the seq of every notice raised."""
    raised = []
    for _ in range(turns):
        notice = watch.tick()
        if notice is not None:
            raised.append(notice.seq)
        clock.sleep(5.0)
    return raised


def test_below_back_above_and_below_again_raises_two_notices_with_figures(
    tmp_path: Path,
) -> None:
    """RAM 30, 8, 7, 20, 9 GB: two notices (at the 8 and the 9), each with its figures and
    time, kept in the state directory, and the server never touched."""
    server = Server()
    watch, clock, probe = make_watch(tmp_path, [30, 8, 7, 20, 9], server, [False])
    assert run(watch, clock, 5) == [1, 2]
    # Every reading is of the running server's own memory domain, not the agent's.
    assert probe.domains == [ServerCgroup(pid=4242)] * 5
    first, second = watch.notices.recent()
    assert (first.headroom_gb, first.available_gb, first.floor_gb) == (8.0, 8.0, 10.74)
    assert first.at == datetime.fromtimestamp(T0 + 5, UTC).isoformat(timespec="milliseconds")
    assert (second.headroom_gb, second.server_pid, second.where) == (9.0, 4242, "host")
    assert "fell to 9.0 GB, below the guard's floor of 10.7 GB" in second.message
    kept = json.loads((tmp_path / "memory_notices.json").read_text())
    assert [n["seq"] for n in kept] == [1, 2]
    assert server.commands == []


def test_no_sample_while_an_operation_runs_or_the_server_does_not_serve(tmp_path: Path) -> None:
    """An operation running (the guard's turn) or a server down: the probe is not read and
    nothing is raised; once it serves again the low reading is the crossing."""
    server = Server(serving=False)
    running = [True]
    watch, clock, probe = make_watch(tmp_path, [5], server, running)
    assert run(watch, clock, 3) == []
    running[0] = False
    assert run(watch, clock, 2) == []
    assert probe.calls == 0
    server.serving = True
    assert run(watch, clock, 1) == [1]


def test_a_probe_error_skips_the_turn(tmp_path: Path) -> None:
    """An unreadable probe is a skipped turn, not a notice and not a crash."""
    watch, clock, probe = make_watch(tmp_path, [None, 30, 4], Server(), [False])
    assert run(watch, clock, 3) == [1]
    assert probe.calls == 3


def test_status_shows_the_notices_and_a_problem_while_below(tmp_path: Path) -> None:
    """The status section lists the notices and says below_floor while the headroom is under
    the floor; the problem sentence is there only then."""
    watch, clock, _ = make_watch(tmp_path, [30, 8, 25], Server(), [False])
    run(watch, clock, 1)
    assert watch.problem() is None
    assert watch.status()["below_floor"] is False
    run(watch, clock, 1)
    body = watch.status()
    assert body["below_floor"] is True
    assert body["last_headroom_gb"] == 8.0
    assert [n["seq"] for n in body["notices"]] == [1]
    problem = watch.problem()
    assert problem is not None
    assert "fell to 8.0 GB" in problem
    assert "since " in problem
    run(watch, clock, 1)
    assert watch.problem() is None


def test_notices_are_numbered_on_across_an_agent_restart(tmp_path: Path) -> None:
    """A new agent reads the notices kept by the last one and numbers its own after them."""
    watch, clock, _ = make_watch(tmp_path, [8], Server(), [False])
    assert run(watch, clock, 1) == [1]
    again, clock, _ = make_watch(tmp_path, [8], Server(), [False])
    assert [n.seq for n in again.notices.recent()] == [1]
    assert run(again, clock, 1) == [2]


def test_a_damaged_notice_file_is_started_afresh(tmp_path: Path) -> None:
    """A notice file that is not a list of notices is not fatal: the log starts empty."""
    (tmp_path / "memory_notices.json").write_text('[{"seq": "x"}]')
    assert MemoryNoticeLog(tmp_path / "memory_notices.json").recent() == []
