"""Every line ``kimi-ops chat`` prints: the core's replies and views laid out for a terminal.

The figures and sentences are the core's (the same a Slack user reads); only the layout is the
terminal's. An operation, as it is drawn while it runs::

    Resize kimi-01: hicache ratio 4 (applied by ana, proposed by ben)
    [#########-----------]  45%  loading weights 29/64 shards   elapsed 6:12  ETA ~8 min
    - stopped old server (12.0 s), GPUs free after 9.0 s
    - starting (2.0 s)
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.agent_json import AgentPlan, AgentStatus
from bot.chat.audit import HistoryEntry, Watch
from bot.chat.progress import Cause, PhaseDone, ProgressView
from bot.chat.replies import (
    CancelledReply,
    FleetProposalReply,
    FleetRefusalReply,
    FleetsReply,
    HelpReply,
    HistoryReply,
    HostAnswer,
    HostsReply,
    MemoryNoticeReply,
    OperationReply,
    ProblemReply,
    ProposalReply,
    RefusalReply,
    RejoinReply,
    Reply,
    ReportReply,
    ReportScheduledReply,
    ReportSchedulesReply,
    ReportStoppedReply,
    RolloutReply,
    StatusReply,
    UsageReply,
)
from bot.chat.wording import PHASE_LABEL, hhmm, history_note, rollback_head, uptime_text
from bot.chat.wording import clock as _clock
from bot.chat.wording import count as _count
from bot.chat.wording import doing as _doing
from bot.chat.wording import figure as _num
from bot.terminal.report_wording import report_reply_lines
from bot.terminal.rollout_wording import fleet_reply_lines
from bot.vocab import EventPhase, OperationState

__all__ = [
    "acting_line",
    "final_line",
    "notice_line",
    "progress_lines",
    "reply_lines",
    "stopped_watching_line",
    "unreachable_line",
]


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 90:
        return f"  ETA ~{int(seconds)} s"
    return f"  ETA ~{round(seconds / 60)} min"


# -- replies ---------------------------------------------------------------------------------


def reply_lines(reply: Reply) -> list[str]:
    """The lines answering one command."""
    if isinstance(reply, HelpReply):
        return list(reply.lines)
    if isinstance(reply, UsageReply):
        return [f"error: {reply.reason}", f"usage: {reply.usage}"]
    if isinstance(reply, StatusReply):
        return [line for answer in reply.hosts for line in _status(answer)]
    if isinstance(reply, HostsReply):
        return [_host_line(answer) for answer in reply.hosts]
    if isinstance(reply, ProposalReply):
        return _proposal(reply)
    if isinstance(reply, RefusalReply):
        return [f"refused: {reply.text}"]
    if isinstance(reply, ProblemReply):
        return [f"error: {reply.text}"]
    if isinstance(reply, MemoryNoticeReply):
        about = "" if reply.operation_id is None else f" (last operation #{reply.operation_id})"
        return [
            f"{reply.host}: memory notice at {hhmm(reply.notice.at)}{about}: {reply.notice.message}"
        ]
    if isinstance(reply, OperationReply):
        return [f"{reply.watch.title}: operation {reply.operation.id} started"]
    if isinstance(reply, CancelledReply):
        return [f"proposal #{reply.proposal_id} cancelled by {reply.by}"]
    if isinstance(reply, HistoryReply):
        return _history(reply.entries)
    if isinstance(
        reply, FleetProposalReply | FleetRefusalReply | RolloutReply | FleetsReply | RejoinReply
    ):
        return fleet_reply_lines(reply)
    assert isinstance(
        reply, ReportReply | ReportScheduledReply | ReportStoppedReply | ReportSchedulesReply
    ), reply
    return report_reply_lines(reply)


def _silent(answer: HostAnswer) -> str:
    return f"{answer.host}: agent unreachable since {hhmm(answer.since)} ({answer.problem})"


def _status(answer: HostAnswer) -> list[str]:
    status = answer.status
    if status is None:
        return [_silent(answer)]
    return [
        f"{answer.host}{' (default)' if answer.default else ''}: server {status.server_state}"
        f", health {status.health_code or 'none'}, SGLang {status.version or '?'}"
        f", up {uptime_text(status.uptime_s)}",
        f"  hicache   {status.effective or 'unknown'}",
        *_live_storage(status),
        f"  KV        device {_count(status.device_tokens)} tokens/rank; host "
        f"{_count(status.host_tokens_per_rank)} tokens, {_num(status.host_gb_per_rank)} GB "
        f"per rank x {status.ranks or '?'} ranks",
        f"  host RAM  {_num(status.ram_available_gb, 1)} GB available of "
        f"{_num(status.ram_total_gb, 1)} GB; {_num(status.ram_server_held_gb, 1)} GB held by "
        f"the server{_cgroup(status)}",
        f"  GPUs      {_gpus(status)}",
        f"  operation {_running(status)}",
        *(f"  problem   {problem}" for problem in status.problems),
    ]


def _live_storage(status: AgentStatus) -> list[str]:
    """The storage tier live (SGLang's GET) beside the command line's, when the agent has it."""
    storage = status.storage
    if storage is None:
        return []
    live = storage.live.phrase() if storage.live else f"unknown ({storage.problem or 'no answer'})"
    note = "  (differs: a restart goes back to the command line)" if storage.differs else ""
    return [
        f"  storage   live {live}; command line {storage.command_line.phrase()}{note}",
    ]


def _cgroup(status: AgentStatus) -> str:
    """ "; cgroup /system.slice (memory.high) limits it to 100.0 GB, 42.0 GB headroom", or ""."""
    if status.ram_cgroup_limit_from is None or status.ram_cgroup_limit_gb is None:
        return ""
    return (
        f"; cgroup {status.ram_cgroup_limit_from} limits it to "
        f"{_num(status.ram_cgroup_limit_gb, 1)} GB, {_num(status.ram_headroom_gb, 1)} GB headroom"
    )


def _gpus(status: AgentStatus) -> str:
    if not status.gpus:
        return f"unknown ({status.gpus_reason or 'no GPU facts'})"
    used = [float(gpu.get("memory_used_gb") or 0) for gpu in status.gpus]
    total = [float(gpu.get("memory_total_gb") or 0) for gpu in status.gpus]
    return f"{len(status.gpus)} x {total[0]:.1f} GB, {min(used):.1f}-{max(used):.1f} GB used each"


def _running(status: AgentStatus) -> str:
    op = status.operation
    if op is None:
        return "none"
    return f"{op.kind} #{op.id} by {op.actor}, {op.state} since {hhmm(op.created_at)}"


def _host_line(answer: HostAnswer) -> str:
    default = " (default)" if answer.default else ""
    if answer.status is None:
        return _silent(answer) + f"  {answer.url}"
    status = answer.status
    return (
        f"{answer.host}{default}: answers; server {status.server_state}, "
        f"{status.effective or 'hicache unknown'}  {answer.url}"
    )


def _proposal(reply: ProposalReply) -> list[str]:
    plan = reply.plan
    now = f"{reply.current} -> " if reply.current else ""
    head = f"Proposal #{reply.id} for {reply.host}: hicache {now}{plan.setting}"
    if reply.rollback is not None:
        head = f"Proposal #{reply.id}: {rollback_head(reply.rollback)}"
    lines = [head, *_plan_lines(plan)]
    if plan.fits:
        lines += [
            f"FITS: {plan.reason}",
            f"apply with: kimi-ops chat apply {reply.id}   (expires {hhmm(reply.expires_at)})",
        ]
    else:
        lines += [f"REFUSED: {plan.reason}", "nothing to apply"]
    lines += [f"  warning: {warning}" for warning in plan.warnings]
    return lines


def _plan_lines(plan: AgentPlan) -> list[str]:
    return [
        f"  per rank    {_count(plan.per_rank_tokens)} tokens  {_num(plan.per_rank_gb)} GB",
        f"  all ranks   {plan.ranks} ranks  {_num(plan.total_gb, 1)} GB",
        f"  budget      {_num(plan.budget_gb, 1)} GB of {_num(plan.free_after_stop_gb, 1)} GB "
        "free after the stop",
        f"  device      {_count(plan.device_tokens)} tokens/rank; host before "
        f"{_count(plan.host_tokens_before)} tokens/rank",
        f"  startup     ~{_clock(plan.expected_startup_s)} expected"
        if plan.expected_startup_s is not None
        else "  startup     no estimate yet",
    ]


def _history(entries: Sequence[HistoryEntry]) -> list[str]:
    if not entries:
        return ["no revisions recorded yet"]
    lines = [
        f"{'rev':>4}  {'host':<10} {'setting':<18} {'outcome':<12} {'proposed':<8} "
        f"{'applied':<8} {'GB/rank plan':>12} {'logged':>7} {'startup':>8}"
    ]
    for entry in entries:
        startup = "" if entry.startup_s is None else f"{entry.startup_s:.0f} s"
        lines.append(
            f"{entry.id:>4}  {entry.host:<10} {entry.setting:<18} {entry.outcome:<12} "
            f"{entry.proposed_by or '-':<8} {entry.applied_by or '-':<8} "
            f"{_num(entry.planned_gb_per_rank):>12} {_num(entry.logged_gb_per_rank):>7} "
            f"{startup:>8}{history_note(entry)}"
        )
    return lines


# -- an operation ----------------------------------------------------------------------------


def _who(watch: Watch) -> str:
    parts = [f"applied by {watch.applied_by}"] if watch.applied_by else []
    if watch.proposed_by:
        parts.append(f"proposed by {watch.proposed_by}")
    return f" ({', '.join(parts)})" if parts else ""


def _done_line(done: PhaseDone) -> str:
    data = done.data
    if done.phase is EventPhase.WAITING_GPUS and "stop_s" in data:
        return f"- stopped old server ({float(data['stop_s']):.1f} s)"
    if done.phase is EventPhase.STARTING and "gpus_free_s" in data:
        return f"- GPUs free after {float(data['gpus_free_s']):.1f} s; started ({done.seconds} s)"
    if done.phase is EventPhase.KV_POOL and "device_tokens" in data:
        return f"- KV pool: {int(data['device_tokens']):,} device tokens ({done.seconds} s)"
    if done.phase is EventPhase.HOST_POOL and "host_gb_per_rank" in data:
        return (
            f"- host pool: {float(data['host_gb_per_rank']):.2f} GB per rank x "
            f"{data.get('ranks', '?')} ranks, pinned ({done.seconds} s)"
        )
    return f"- {PHASE_LABEL.get(done.phase, str(done.phase))} ({done.seconds} s)"


def progress_lines(watch: Watch, view: ProgressView) -> list[str]:
    """The block drawn (and redrawn in place) while an operation runs."""
    state = ""
    if view.stalled:
        state = "  STALLED"
    elif view.state is OperationState.ROLLING_BACK:
        state = "  ROLLING BACK"
    lines = [
        f"{watch.title}{_who(watch)}",
        f"{view.bar} {view.percent:>3}%  {_doing(view)}   elapsed {_clock(view.elapsed_s)}"
        f"{_eta(view.eta_s)}{state}",
    ]
    if view.rollback is not None:
        lines += _cause_lines("start failed", view.rollback)
    lines += [_done_line(done) for done in view.done if done.phase is not EventPhase.PLANNED]
    return lines


def _cause_lines(what: str, cause: Cause) -> list[str]:
    where = f" in {cause.phase}" if cause.phase else ""
    return [f"! {what}{where}: {cause.kind}", *(f"  | {line}" for line in cause.lines)]


def final_line(watch: Watch, view: ProgressView) -> list[str]:
    """The end of an operation: its figures, or its failure and the decisive log lines."""
    final = view.final
    if view.state is OperationState.READY and (final is None or final.startup_s is None):
        # No start to report: a live change, whose last word says what it did.
        return [f"READY {watch.host}: {view.message}"]
    if view.state is OperationState.READY and final is not None:
        planned = (
            ""
            if final.planned_gb_per_rank is None
            else f" (planned {final.planned_gb_per_rank:.2f})"
        )
        return [
            f"READY {watch.host}: {_count(final.device_tokens)} device tokens/rank; host "
            f"{_count(final.host_tokens_per_rank)} tokens, {_num(final.host_gb_per_rank)} GB per "
            f"rank{planned} x {final.ranks or '?'} = {_num(final.host_gb_total, 1)} GB; started in "
            f"{_num(final.startup_s, 0)} s"
        ]
    if view.state is OperationState.ROLLED_BACK:
        lines = [f"ROLLED BACK {watch.host}: the new config did not start; {view.message}"]
        return lines + ([] if view.rollback is None else _cause_lines("cause", view.rollback))
    lines = [f"FAILED {watch.host}: {view.message}"]
    return lines + ([] if view.failure is None else _cause_lines("cause", view.failure))


def notice_line(people: tuple[str, ...], watch: Watch, view: ProgressView) -> str:
    to = " ".join(f"@{person}" for person in people) or "(nobody to notify)"
    word = {
        OperationState.STALLED: "stalled",
        OperationState.ROLLING_BACK: "failed to start; rolling back",
        OperationState.READY: "is ready",
        OperationState.FAILED: "failed",
        OperationState.ROLLED_BACK: "was rolled back",
    }.get(view.state, str(view.state))
    return f"{to}: {watch.title} {word}"


def unreachable_line(watch: Watch, since_hhmm: str) -> str:
    return f"{watch.host}: agent unreachable since {since_hhmm}; still watching"


def acting_line(person: str) -> str:
    """What the prompt says after ``as NAME``."""
    return f"acting as {person} from now on ('as NAME' switches again)"


def stopped_watching_line(operation_id: int) -> str:
    return f"stopped watching; operation {operation_id} goes on at the agent"
