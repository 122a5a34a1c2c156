"""The terminal's layout of the core's replies and views, and the exit code of each reply."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

from bot.agent_json import AgentEvent, AgentPlan, AgentStatus
from bot.chat.audit import Watch
from bot.chat.policy import Action, Refusal, RefusalKind
from bot.chat.progress import progress_view
from bot.chat.replies import (
    HostAnswer,
    ProblemReply,
    ProposalReply,
    RefusalReply,
    StatusReply,
    UsageReply,
)
from bot.terminal.cli import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, exit_code
from bot.terminal.front import TerminalFrontEnd
from bot.terminal.wording import final_line, progress_lines, reply_lines
from bot.vocab import OperationState
from tests.reports._fixtures import status_json
from tests.slack._samples import memory_notice_reply

FIXTURES = Path(__file__).parents[1] / "fixtures" / "agent_events"
WATCH = Watch("kimi-01", 3, "Resize kimi-01: hicache ratio 4", "ben", "ana")


def _page(name: str) -> dict[str, object]:
    page: dict[str, object] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return page


def _events(name: str) -> list[AgentEvent]:
    return [AgentEvent.from_json(e) for e in _page(name)["events"]]  # type: ignore[attr-defined]


def _plan(fits: bool) -> AgentPlan:
    page = _page("resize_ratio4_ready")
    raw = dict(page["operation"]["plan"])  # type: ignore[index]
    raw["verdict"] = "fits" if fits else "refused"
    return AgentPlan.from_json(raw)


def test_exit_codes_follow_the_reply() -> None:
    """Usage 2, refusal 3, a refused plan 3, a fitting plan 0, a problem 1."""
    at = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    refusal = Refusal(RefusalKind.UNAUTHORIZED, Action.APPLY, "eve")
    assert exit_code(UsageReply("x", "y")) == EXIT_USAGE
    assert exit_code(RefusalReply(refusal, "no")) == EXIT_REFUSED
    assert exit_code(ProposalReply(1, "kimi-01", _plan(False), "ben", at, None)) == EXIT_REFUSED
    assert exit_code(ProposalReply(1, "kimi-01", _plan(True), "ben", at, None)) == EXIT_OK
    assert exit_code(ProblemReply("agent kimi-01 cannot be reached")) == EXIT_FAILED


def test_the_progress_block_shows_who_bar_phase_and_phases_done() -> None:
    """Mid-load: the title with applier and proposer, the bar with shards, the stop and GPU
    wait with their figures from the agent's events."""
    events = _events("resize_ratio4_ready")
    upto = next(i for i, e in enumerate(events) if e.data.get("shard") == 29) + 1
    lines = progress_lines(WATCH, progress_view(events[:upto], OperationState.RUNNING))
    assert lines[0] == "Resize kimi-01: hicache ratio 4 (applied by ana, proposed by ben)"
    assert "loading weights 29/64 shards" in lines[1]
    stop_s = events[2].data["stop_s"]
    assert f"- stopped old server ({stop_s:.1f} s)" in lines


def test_a_rollback_shows_its_cause_and_the_decisive_lines() -> None:
    """The final lines of a rolled-back resize name host_memory and quote SGLang's line."""
    view = progress_view(
        _events("resize_size24_host_memory_rolled_back"), OperationState.ROLLED_BACK
    )
    lines = final_line(WATCH, view)
    assert lines[0].startswith("ROLLED BACK kimi-01")
    assert "! cause in cuda_graph: host_memory" in lines
    assert any("Not enough host memory available" in line for line in lines)


def test_a_terminal_redraws_the_block_in_place_and_a_pipe_gets_lines() -> None:
    """On a tty the second view moves the cursor up over the first block; in a pipe each view
    is one bar line and nothing else."""
    events = _events("resize_ratio4_ready")
    first = progress_view(events[:10], OperationState.RUNNING)
    second = progress_view(events[:20], OperationState.RUNNING)
    tty, pipe = io.StringIO(), io.StringIO()
    for out, is_tty in ((tty, True), (pipe, False)):
        front = TerminalFrontEnd(out, tty=is_tty)
        front.progress(WATCH, first)
        front.progress(WATCH, second)
    drawn = len(progress_lines(WATCH, first))
    assert f"\x1b[{drawn}F\x1b[J" in tty.getvalue()
    assert "\x1b[" not in pipe.getvalue()
    assert [line[:1] for line in pipe.getvalue().splitlines()] == ["[", "["]


def test_status_shows_the_servers_cgroup_limit_and_headroom() -> None:
    """An agent reporting a cgroup limit: the host RAM line names the level, the limit and the
    headroom; an agent without one (or older) shows the line as before."""
    ram = {
        "total_gb": 25.3,
        "available_gb": 22.7,
        "server_held_gb": 2.34,
        "cgroup_limit_gb": 15.03,
        "cgroup_limit_from": "/process_api/abc (memory.limit_in_bytes)",
        "headroom_gb": 13.03,
    }
    limited = AgentStatus.from_json(status_json(ram=ram))
    plain = AgentStatus.from_json(status_json())
    lines = reply_lines(
        StatusReply(
            (
                HostAnswer("kimi-01", "http://a", True, limited, None),
                HostAnswer("kimi-02", "http://b", False, plain, None),
            )
        )
    )
    ram_lines = [line for line in lines if line.startswith("  host RAM")]
    assert ram_lines == [
        "  host RAM  22.7 GB available of 25.3 GB; 2.3 GB held by the server; cgroup "
        "/process_api/abc (memory.limit_in_bytes) limits it to 15.0 GB, 13.0 GB headroom",
        "  host RAM  237.9 GB available of 449.0 GB; 207.1 GB held by the server",
    ]


def test_a_memory_notice_is_one_line_with_its_time_operation_and_figures() -> None:
    """The post-ready watch's notice reads as one line: host, time, last operation, sentence."""
    reply = memory_notice_reply()
    assert reply_lines(reply) == [
        "kimi-01: memory notice at 10:31 UTC (last operation #12): after ready: the server's "
        "cgroup has 3.0 GB left under its 14.0 GB limit, below the guard's floor of 10.7 GB "
        "(7.8 GB short); the server keeps running, nothing was restarted, and the OOM killer "
        "may end it if memory keeps growing"
    ]
