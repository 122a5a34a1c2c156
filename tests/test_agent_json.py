"""The one reader of the agent's JSON, fed with pages a real agent wrote (``tests/fixtures/
agent_events/``, recorded from ``kimi-ops agent`` on the simulator) and with broken copies."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.agent_json import (
    AgentFailure,
    AgentOperation,
    AgentPlan,
    AgentStatus,
    OperationPage,
    PlannedChange,
    read_revisions,
)
from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.vocab import EventPhase, FailureKind, OperationKind, OperationState

FIXTURES = Path(__file__).parent / "fixtures" / "agent_events"


def _page(name: str) -> dict[str, Any]:
    page: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return page


def test_a_rolled_back_page_reads_every_field_the_agent_sent() -> None:
    """The rolled-back page's operation, failure, plan and events come out typed, each value
    the one in the JSON."""
    raw = _page("resize_size24_host_memory_rolled_back")
    page = OperationPage.from_json(raw)
    op, sent = page.operation, raw["operation"]
    assert (op.id, op.kind, op.state) == (
        sent["id"],
        OperationKind.RESIZE,
        OperationState.ROLLED_BACK,
    )
    assert op.finished
    assert op.created_at == datetime.fromisoformat(sent["created_at"])
    assert op.created_at.tzinfo is not None
    assert (op.revision, op.rollback_of, op.outcome) == (4, 4, sent["outcome"])
    assert op.failure is not None
    assert op.failure.kind is FailureKind.HOST_MEMORY
    assert op.failure.lines == tuple(sent["failure"]["lines"])
    assert op.failure.figures.device_tokens == sent["failure"]["device_tokens"] == 200_000
    assert op.failure.figures.host_gb_per_rank is None
    assert op.plan is not None
    assert op.plan.verdict is Verdict(sent["plan"]["verdict"])
    assert op.plan.size_gb == 24.0
    assert op.plan.requested_setting == HiCacheSetting(enabled=True, size_gb=24)
    assert [e.seq for e in page.events] == list(range(1, len(raw["events"]) + 1))
    assert [e.phase.value for e in page.events] == [e["phase"] for e in raw["events"]]
    assert page.events[-1].phase is EventPhase.ROLLED_BACK
    assert page.last_seq == raw["last_seq"]
    assert [e.to_json()["data"] for e in page.events] == [e["data"] for e in raw["events"]]


def test_fields_this_kimi_ops_does_not_know_are_kept_not_refused() -> None:
    """An agent that adds fields this kimi-ops does not know to the operation, its plan, failure
    and events is read to the same values, the new fields kept in ``raw``."""
    raw = _page("resize_size24_host_memory_rolled_back")
    op = raw["operation"]
    grown = {
        **raw,
        "operation": {
            **op,
            "priority": "batch",
            "plan": {**op["plan"], "caller": "bot-token"},
            "failure": {**op["failure"], "signal": "SIGKILL"},
        },
        "events": [{**e, "caller": "bot-token"} for e in raw["events"]],
    }
    before, after = OperationPage.from_json(raw), OperationPage.from_json(grown)
    assert after == before
    assert after.operation.raw["priority"] == "batch"
    assert after.operation.failure is not None
    assert after.operation.failure.raw["signal"] == "SIGKILL"


def test_the_token_that_started_an_operation_is_read_as_its_caller() -> None:
    """The agent names the token behind an operation as ``caller``; an older agent's answer
    without it reads as no caller."""
    raw = _page("resize_size24_host_memory_rolled_back")
    named = {**raw, "operation": {**raw["operation"], "caller": "slack-bot"}}
    assert OperationPage.from_json(named).operation.caller == "slack-bot"
    unnamed = {**raw, "operation": {k: v for k, v in raw["operation"].items() if k != "caller"}}
    assert OperationPage.from_json(unnamed).operation.caller is None


def test_a_failure_before_any_start_has_no_lines() -> None:
    """A start that never began (GPUs held by a stray) has no log: its failure reads with no
    lines, its kind and sentence kept."""
    failure = AgentFailure.from_json(
        {"kind": "gpu_busy", "message": "GPUs 0,1 still held by PID 4242", "processes": []},
        "the failure",
    )
    assert (failure.kind, failure.lines) == (FailureKind.GPU_BUSY, ())
    assert failure.message == "GPUs 0,1 still held by PID 4242"


def test_a_size_that_is_not_whole_is_not_a_setting() -> None:
    """A plan asked for 44.5 GB keeps the request in ``raw`` but its setting has no size, as
    SGLang's parser takes whole GB only; 44 GB is the setting 44."""
    plan = _page("resize_size24_host_memory_rolled_back")["operation"]["plan"]
    half = AgentPlan.from_json({**plan, "request": {"ratio": None, "size_gb": 44.5}})
    whole = AgentPlan.from_json({**plan, "request": {"ratio": None, "size_gb": 44}})
    assert half.requested_setting == HiCacheSetting(enabled=True)
    assert half.raw["request"]["size_gb"] == 44.5
    assert whole.requested_setting == HiCacheSetting(enabled=True, size_gb=44)


def _with(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """The rolled-back page with the value at ``path`` replaced (``...`` deletes it)."""
    page = _page("resize_size24_host_memory_rolled_back")
    node: Any = page
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return page


BAD_PAGES = [
    (("operation", "state"), "exploded", "operation 3's state 'exploded' is not one"),
    (("operation", "kind"), "resize_all", "operation 3's kind 'resize_all' is not one"),
    (("operation", "id"), "3", "'id' is '3'"),
    (("operation", "id"), True, "'id' is True"),
    (("operation", "actor"), ..., "operation 3 has no 'actor'"),
    (("operation", "created_at"), "2026-11-30T07:42:46", "has no time zone"),
    (("operation", "finished_at"), "yesterday", "finished_at 'yesterday' is not an ISO"),
    (("operation", "failure", "kind"), "host_ram", "failure's kind 'host_ram' is not one"),
    (("operation", "failure", "lines"), [1, 2], "'lines' holds something other than text"),
    (("operation", "failure", "host_gb_per_rank"), float("inf"), "not a finite number"),
    (("operation", "plan", "verdict"), "maybe", "plan's verdict 'maybe' is not one"),
    (("operation", "plan", "request"), ..., "plan has no 'request'"),
    (("events", 0, "phase"), "loading_weights", "event 1's phase 'loading_weights' is not"),
    (("events", 0, "data"), [], "event 1's data is list, not a JSON object"),
    (("events",), "x", "'events' is 'x'"),
    (("last_seq",), ..., "page has no 'last_seq'"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_PAGES, ids=[m for *_, m in BAD_PAGES])
def test_a_page_that_cannot_be_read_names_the_field(
    path: tuple[str | int, ...], value: Any, message: str
) -> None:
    """Each broken field raises AgentError naming it (and the operation or event it is in)."""
    with pytest.raises(AgentError, match=message):
        OperationPage.from_json(_with(path, value))


def test_a_plan_answer_needs_its_fingerprint() -> None:
    """``/v1/plans`` without a fingerprint, or with an empty one, cannot be proposed."""
    plan = _page("resize_size24_host_memory_rolled_back")["operation"]["plan"]
    assert PlannedChange.from_json({"plan": plan, "fingerprint": "ab12"}).fingerprint == "ab12"
    with pytest.raises(AgentError, match="has no 'fingerprint'"):
        PlannedChange.from_json({"plan": plan})
    with pytest.raises(AgentError, match="empty 'fingerprint'"):
        PlannedChange.from_json({"plan": plan, "fingerprint": ""})


def test_revisions_are_read_by_id_and_an_empty_argv_is_refused() -> None:
    """``/v1/revisions`` comes back by the agent's id with argv, setting and figures; a revision
    whose argv is empty is refused naming it."""
    revision = {
        "id": 7, "argv": ["python3", "-m", "sglang.launch_server", "--hicache-size", "12"],
        "hicache": {"enabled": True, "size_gb": 12, "ratio": None}, "became_ready": True,
        "startup_s": 41.5, "host_gb_per_rank": 12.0, "created_at": "2026-11-30T07:42:46+00:00",
        "finished_at": None, "actor": "ana", "caller": "bot-token",
    }  # fmt: skip
    read = read_revisions({"revisions": [revision]})
    assert list(read) == [7]
    assert read[7].argv[-1] == "12"
    assert read[7].setting == HiCacheSetting(enabled=True, size_gb=12)
    assert read[7].figures.startup_seconds == 41.5
    assert read[7].created_at == datetime(2026, 11, 30, 7, 42, 46, tzinfo=UTC)
    with pytest.raises(AgentError, match="revision 7's argv is empty"):
        read_revisions({"revisions": [{**revision, "argv": []}]})


def test_an_operation_with_no_plan_or_failure_reads_as_none() -> None:
    """A restart carries no plan and, when ready, no failure: both read as None."""
    sent = _page("resize_ratio4_ready")["operation"]
    op = AgentOperation.from_json({**sent, "kind": "restart", "plan": None})
    assert (op.kind, op.plan, op.failure) == (OperationKind.RESTART, None, None)
    assert op.state is OperationState.READY


def _status_with_memory(memory_watch: Any) -> dict[str, Any]:
    return {
        "host": {"name": "kimi-01"},
        "server": {"state": "running"},
        "fingerprint": "f",
        "memory_watch": memory_watch,
    }


def test_the_memory_watchs_notices_are_read_with_their_figures() -> None:
    """The post-ready watch's section gives typed notices and below_floor; an agent older than
    the watch (no section) reads as no notices, not below the floor."""
    status = AgentStatus.from_json(
        _status_with_memory(
            {
                "below_floor": True,
                "notices": [
                    {
                        "seq": 3,
                        "at": "2026-02-24T11:31:02.114+00:00",
                        "where": "cgroup",
                        "headroom_gb": 2.96,
                        "available_gb": 40.1,
                        "cgroup_limit_gb": 14.0,
                        "floor_gb": 10.74,
                        "message": "after ready: the server's cgroup ...",
                    },
                ],
            }
        )
    )
    assert status.memory.below_floor
    (notice,) = status.memory.notices
    assert (notice.seq, notice.where, notice.headroom_gb, notice.cgroup_limit_gb) == (
        3,
        "cgroup",
        2.96,
        14.0,
    )
    assert notice.at == datetime(2026, 2, 24, 11, 31, 2, 114000, tzinfo=UTC)
    older = AgentStatus.from_json(_status_with_memory(None))
    assert (older.memory.below_floor, older.memory.notices) == (False, ())


@pytest.mark.parametrize(
    ("notice", "names"),
    [
        ({"seq": 0, "at": "2026-02-24T11:31:02+00:00", "headroom_gb": 1, "floor_gb": 2}, "seq"),
        ({"seq": 1, "at": "2026-02-24T11:31:02", "where": "host", "headroom_gb": 1,
          "floor_gb": 2, "message": "m"}, "time zone"),
        ({"seq": 1, "at": "2026-02-24T11:31:02+00:00", "where": "host", "headroom_gb": "x",
          "floor_gb": 2, "message": "m"}, "headroom_gb"),
    ],
)  # fmt: skip
def test_a_notice_that_cannot_be_read_names_the_field(notice: dict[str, Any], names: str) -> None:
    """A notice without a valid seq, a zoned time or figures is refused, naming what is wrong."""
    with pytest.raises(AgentError, match=names):
        AgentStatus.from_json(_status_with_memory({"notices": [notice]}))
