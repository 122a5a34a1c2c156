"""Fixed inputs for every kind of Slack message, and the golden files they are checked against.

``python -m tests.slack._samples`` rewrites ``tests/slack/golden/*.json`` from these inputs:
run it after a deliberate wording change and review the diff.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.agent_json import AgentEvent, AgentPlan, AgentStatus
from bot.chat._usage import HELP_LINES
from bot.chat.audit import HistoryEntry, Watch
from bot.chat.progress import progress_view
from bot.chat.replies import (
    HostAnswer,
    HostReportView,
    HostsReply,
    MemoryNoticeReply,
    ProposalReply,
    ReportReply,
    ReportScheduledReply,
    ReportSchedulesReply,
    ReportStoppedReply,
    StatusReply,
)
from bot.chat.reporting import ChartImage
from bot.reports import GpuMemory, HostReport, LastOperation, ServerMetrics
from bot.slack import messages, report_messages
from bot.slack._blocks import SlackMessage
from bot.store.records import ReportSchedule
from bot.vocab import EventPhase, OperationKind, OperationState, ServerState
from tests.slack._rollout_samples import rollout_samples

GOLDEN = Path(__file__).resolve().parent / "golden"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)

PLAN = {
    "verdict": "fits",
    "reason": "ratio 4 needs 8 ranks x 44.77 GB = 358.2 GB; 596.0 GB free after stop (396.0 "
    "available + 200.0 released by the restart) - 10.7 GB SGLang reserve - 40.0 GB headroom "
    "leaves 545.3 GB: fits with 187.1 GB to spare.",
    "setting": "ratio 4 x device pool",
    "request": {"ratio": 4},
    "ranks": 8,
    "per_rank_tokens": 637_097,
    "per_rank_gb": 44.77,
    "total_gb": 358.2,
    "free_after_stop_gb": 596.0,
    "budget_gb": 545.3,
    "headroom_left_gb": 187.1,
    "device_tokens": 159_274,
    "host_tokens_before": 318_549,
    "expected_startup_s": 610.0,
    "warnings": [],
}
_REFUSED = {
    **PLAN,
    "verdict": "refused",
    "setting": "size 300 GB per rank",
    "request": {"size_gb": 300},
    "per_rank_gb": 300.0,
    "total_gb": 2400.0,
    "headroom_left_gb": -1854.7,
    "reason": "size 300 needs 8 ranks x 300.00 GB = 2,400.0 GB but only 545.3 GB fit: try "
    "size 68 or less (or ratio 6).",
}
WATCH = Watch("kimi-01", 7, "Resize kimi-01: hicache ratio 4 x device pool", "U0BEN", "U0ANA")


def proposal_reply(plan: dict[str, Any] = PLAN, pid: int = 12) -> ProposalReply:
    return ProposalReply(
        id=pid,
        host="kimi-01",
        plan=AgentPlan.from_json(plan),
        proposed_by="U0BEN",
        expires_at=T0 + timedelta(minutes=15),
        current="ratio 2 x device pool",
    )


def _event(seq: int, second: float, phase: EventPhase, progress: float, **data: Any) -> AgentEvent:
    at = T0 + timedelta(seconds=second)
    return AgentEvent(seq, at, phase, f"{phase.value}", progress, data)


def _start(offset: int = 0, ready: bool = True) -> list[AgentEvent]:
    events = [
        _event(1 + offset, 0, EventPhase.PLANNED, 0.0),
        _event(2 + offset, 1, EventPhase.STOPPING, 0.02),
        _event(3 + offset, 13, EventPhase.WAITING_GPUS, 0.05, stop_s=12.0),
        _event(4 + offset, 22, EventPhase.STARTING, 0.07, gpus_free_s=9.0),
        _event(5 + offset, 30, EventPhase.INIT, 0.1, ranks=8),
        _event(6 + offset, 60, EventPhase.LOAD_WEIGHTS, 0.3, shard=29, shards=64, eta_s=480.0),
    ]
    if ready:
        events += [
            _event(7 + offset, 300, EventPhase.KV_POOL, 0.7, device_tokens=159_274),
            _event(8 + offset, 420, EventPhase.HOST_POOL, 0.85, host_gb_per_rank=44.77, ranks=8,
                   host_gb_total=358.16),
            _event(9 + offset, 560, EventPhase.HTTP, 0.95),
            _event(10 + offset, 590, EventPhase.READY, 1.0, device_tokens=159_274,
                   host_tokens_per_rank=637_097, host_gb_per_rank=44.77, ranks=8,
                   startup_s=568.0),
        ]  # fmt: skip
    return events


_LINES = [
    "[2026-11-30 10:04:01 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    "RuntimeError: Not enough host memory available. Requesting 44.77 GB but only have "
    "38.20 GB free. Please reduce the size of the hierarchical cache.",
]


def _rolled_back() -> list[AgentEvent]:
    cause = {"kind": "host_memory", "phase": "host_pool", "lines": _LINES}
    events = _start(ready=False)
    return [
        *events,
        _event(7, 200, EventPhase.ROLLING_BACK, 0.0, cause=cause),
        _event(8, 201, EventPhase.STARTING, 0.1),
        _event(9, 400, EventPhase.ROLLED_BACK, 1.0, device_tokens=159_274,
               host_tokens_per_rank=318_549, host_gb_per_rank=22.39, ranks=8, startup_s=199.0),
    ]  # fmt: skip


def _status(answer_state: ServerState = ServerState.RUNNING) -> AgentStatus:
    gpus = tuple(
        {"index": i, "memory_total_gb": 96.0, "memory_used_gb": 80.2 + i / 10, "processes": []}
        for i in range(8)
    )
    return AgentStatus(
        host="kimi-01",
        server_state=answer_state,
        health_code=200,
        version="0.5.9",
        uptime_s=3725.0,
        hicache=None,
        effective="ratio 2 x device pool",
        device_tokens=159_274,
        host_tokens_per_rank=318_549,
        host_gb_per_rank=22.39,
        ranks=8,
        ram_total_gb=449.0,
        ram_available_gb=196.0,
        ram_server_held_gb=200.0,
        gpus=gpus,
        gpus_reason=None,
        operation=None,
        fingerprint="f",
        problems=(),
        raw={},
    )


def _answers() -> tuple[HostAnswer, ...]:
    return (
        HostAnswer("kimi-01", "http://10.0.0.1:7300", True, _status(), None),
        HostAnswer("kimi-02", "http://10.0.0.2:7300", False, None, "connection refused", T0),
    )


def history_entries(count: int) -> list[HistoryEntry]:
    return [
        HistoryEntry(
            id=count - i,
            host="kimi-01",
            setting="ratio 4" if i % 2 else "size 48 GB/rank",
            proposed_by="U0BEN",
            applied_by="U0ANA",
            proposed_at=T0 - timedelta(hours=i),
            outcome="ready" if i % 3 else "rolled_back",
            planned_gb_per_rank=44.77,
            logged_gb_per_rank=44.77 if i % 3 else None,
            startup_s=568.0 if i % 3 else None,
            device_tokens=159_274,
            failure_kind=None if i % 3 else "host_memory",
        )
        for i in range(count)
    ]


def _view(events: list[AgentEvent], state: OperationState) -> Any:
    return progress_view(events, state, now=events[-1].at, planned_gb_per_rank=44.77)


def host_report() -> HostReport:
    """The field notes' host at ratio 2, busy: its figures as a report carries them."""
    return HostReport(
        host="kimi-01",
        at=T0,
        server_state=ServerState.RUNNING.value,
        version="0.5.9",
        uptime_s=8_000.0,
        setting="ratio 2 x device pool",
        revision=3,
        ram_total_gb=449.0,
        ram_available_gb=237.9,
        hicache_gb=179.2,
        ranks=8,
        gpus=tuple(GpuMemory(i, 94.5, 96.0) for i in range(8)),
        device_tokens=159_274,
        host_tokens_per_rank=318_549,
        metrics=ServerMetrics(0.97, 50, 80, 0.12),
        last_operation=LastOperation(
            4, OperationKind.RESIZE.value, OperationState.READY.value, "U0ANA", T0
        ),
    )


def report_reply(scheduled: bool = False) -> ReportReply:
    chart = ChartImage(
        "kimi-01", lambda: b"png", "kimi-01-capacity.png", "Capacity of kimi-01", (720, 720)
    )
    busy = HostReportView(
        host_report(),
        chart=chart,
        proposal=proposal_reply(pid=7),
        evidence="token usage 96-98% over the last 30 min with 80 queued and RAM to spare",
    )
    silent = HostReportView(HostReport("kimi-02", T0, problem="connection refused"))
    return ReportReply((busy, silent), schedule=_schedule() if scheduled else None)


def _schedule(sid: int = 2) -> ReportSchedule:
    return ReportSchedule(
        sid, "C0OPS", None, "every 6h", T0 + timedelta(hours=6), "U0BEN", T0, True
    )


def daily_in_paris() -> ReportSchedule:
    """``report daily 09:30`` read in Europe/Paris: next at 08:30 UTC (CET is UTC+1 in winter)."""
    next_run = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
    return ReportSchedule(4, "C0OPS", None, "daily 09:30", next_run, "U0BEN", T0, True)


def memory_notice_reply() -> MemoryNoticeReply:
    """The post-ready watch's notice: a cgroup left with 3.0 GB under its 14 GB limit."""
    status = AgentStatus.from_json(
        {
            "host": {"name": "kimi-01"},
            "server": {"state": "running"},
            "fingerprint": "f",
            "memory_watch": {
                "below_floor": True,
                "notices": [
                    {
                        "seq": 1,
                        "at": (T0 + timedelta(minutes=31)).isoformat(),
                        "where": "cgroup",
                        "headroom_gb": 2.96,
                        "available_gb": 40.12,
                        "cgroup_limit_gb": 14.0,
                        "floor_gb": 10.74,
                        "message": "after ready: the server's cgroup has 3.0 GB left under its "
                        "14.0 GB limit, below the guard's floor of 10.7 GB (7.8 GB short); the "
                        "server keeps running, nothing was restarted, and the OOM killer may "
                        "end it if memory keeps growing",
                    }
                ],
            },
        }
    )
    return MemoryNoticeReply("kimi-01", status.memory.notices[0], operation_id=12)


#: Every message kind: its golden file's name and how it is made.
SAMPLES: dict[str, Callable[[], SlackMessage | list[SlackMessage]]] = {
    "proposal_fits": lambda: messages.proposal(proposal_reply()),
    "proposal_refused": lambda: messages.proposal(proposal_reply(_REFUSED, 13)),
    "proposal_expired": lambda: messages.closed_proposal(
        proposal_reply(), 12, messages.expired_line(T0 + timedelta(minutes=15))
    ),
    "proposal_void": lambda: messages.closed_proposal(
        None, 12, messages.void_line("kimi-01", T0 + timedelta(minutes=3))
    ),
    "proposal_cancelled": lambda: messages.closed_proposal(
        proposal_reply(), 12, messages.cancelled_line("U0BEN")
    ),
    "progress_loading": lambda: messages.progress(
        WATCH, _view(_start(ready=False), OperationState.RUNNING)
    ),
    "progress_ready": lambda: messages.progress(WATCH, _view(_start(), OperationState.READY)),
    "progress_rolling_back": lambda: messages.progress(
        WATCH, _view(_rolled_back()[:8], OperationState.ROLLING_BACK)
    ),
    "progress_rolled_back": lambda: messages.progress(
        WATCH, _view(_rolled_back(), OperationState.ROLLED_BACK)
    ),
    "notice_ready": lambda: messages.notice(
        ("U0BEN", "U0ANA"), WATCH, _view(_start(), OperationState.READY)
    ),
    "notice_rolled_back": lambda: messages.notice(
        ("U0BEN", "U0ANA"), WATCH, _view(_rolled_back(), OperationState.ROLLED_BACK)
    ),
    "notice_stalled": lambda: messages.notice(
        ("U0BEN", "U0ANA"), WATCH, _view(_start(ready=False), OperationState.STALLED)
    ),
    "unreachable": lambda: messages.unreachable(WATCH, T0),
    "memory_notice": lambda: messages.memory_notice(memory_notice_reply()),
    "status": lambda: messages.status_card(StatusReply(_answers())),
    "hosts": lambda: messages.hosts_message(HostsReply(_answers())),
    "history_pages": lambda: messages.history_pages(None, history_entries(45)),
    "history_empty": lambda: messages.history_pages("kimi-01", []),
    "help": lambda: messages.help_message(HELP_LINES),
    "usage": lambda: messages.ephemeral(
        "usage", "ratio 'abc' is not a number", "resize ratio <R> [host] | resize size <GB> [host]"
    ),
    "refused": lambda: messages.ephemeral(
        "refused", "U0EVE may not apply proposals: only the people in [policy] appliers may"
    ),
    "error": lambda: messages.ephemeral("error", "the agent on kimi-01 did not answer"),
    "post_failed": lambda: messages.post_failed("C0OPS", "not_in_channel", 200),
    "post_failed_rate_limited": lambda: messages.post_failed("C0OPS", "ratelimited", 429),
    "post_failed_slack_fault": lambda: messages.post_failed("C0OPS", "internal_error", 500),
    "report": lambda: report_messages.report(report_reply()),
    "report_scheduled_run": lambda: report_messages.report(report_reply(scheduled=True)),
    "report_scheduled": lambda: report_messages.report_scheduled(
        ReportScheduledReply(daily_in_paris(), "daily 09:30", "Europe/Paris")
    ),
    "report_stopped": lambda: report_messages.report_stopped(
        ReportStoppedReply("C0OPS", (_schedule(),))
    ),
    "report_stopped_none": lambda: report_messages.report_stopped(ReportStoppedReply("C0OPS", ())),
    "report_schedules": lambda: report_messages.report_schedules(
        ReportSchedulesReply((_schedule(), _schedule(3)), ("every 6h", "every 6h"), "UTC")
    ),
    "report_schedules_none": lambda: report_messages.report_schedules(
        ReportSchedulesReply((), (), "UTC")
    ),
}

SAMPLES.update(rollout_samples(_answers()))  # the fleet's messages


def as_json(made: SlackMessage | list[SlackMessage]) -> Any:
    if isinstance(made, list):
        return [page.to_json() for page in made]
    return made.to_json()


def golden_path(kind: str) -> Path:
    return GOLDEN / f"{kind}.json"


def render(kind: str) -> str:
    return json.dumps(as_json(SAMPLES[kind]()), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    for name in SAMPLES:
        golden_path(name).write_text(render(name), encoding="utf-8")
        print(golden_path(name))
