"""The terminal's layout of capacity reports and their schedules. One host, as printed::

kimi-01: capacity at 09:00 UTC, server running, SGLang 0.5.9, up 2:13:05
  hicache   ratio 2 x device pool (revision 3)
  host RAM  449.0 GB total, 237.9 GB available, 179.2 GB held by HiCache
  KV        device 159,274 tokens; host 318,549 tokens/rank
  load      token usage 97%, 50 running, 80 queued, cache hit rate 12%
  GPUs      0: 94.5/96.0 GB  1: 94.5/96.0 GB ...
  last op   #4 resize ready, by ana at 08:12
  memory    11:31 after ready: host RAM available fell to 8.2 GB, below the guard's floor ...
  chart     kimi-01-capacity-20261130-0900.png (720x720): Capacity of kimi-01: ...
  advice    token usage 96-98% over the last 30 min ... -> proposal #7 (resize ratio 4)
"""

from __future__ import annotations

from bot.chat.replies import (
    FleetProposalReply,
    FleetRefusalReply,
    HostReportView,
    ReportReply,
    ReportScheduledReply,
    ReportSchedulesReply,
    ReportStoppedReply,
)
from bot.chat.wording import hhmm, load_text, local_time, uptime_text
from bot.reports import HostReport

__all__ = ["report_reply_lines"]

ReportReplies = ReportReply | ReportScheduledReply | ReportStoppedReply | ReportSchedulesReply


def _gb(value: float | None) -> str:
    return "?" if value is None else f"{value:,.1f} GB"


def _host(view: HostReportView) -> list[str]:
    report: HostReport = view.report
    if not report.answered:
        return [f"{report.host}: agent unreachable at {hhmm(report.at)} ({report.problem})"]
    revision = "" if report.revision is None else f" (revision {report.revision})"
    gpus = "  ".join(
        f"{g.index}: {'?' if g.used_gb is None else f'{g.used_gb:.1f}'}/"
        f"{'?' if g.total_gb is None else f'{g.total_gb:.1f}'} GB"
        for g in report.gpus
    )
    lines = [
        f"{report.host}: capacity at {hhmm(report.at)}, server {report.server_state}, "
        f"SGLang {report.version or '?'}, up {uptime_text(report.uptime_s)}",
        f"  hicache   {report.setting or 'unknown'}{revision}",
        f"  host RAM  {_gb(report.ram_total_gb)} total, {_gb(report.ram_available_gb)} "
        f"available, {_gb(report.hicache_gb)} held by HiCache",
        f"  KV        device {report.device_tokens or 0:,} tokens; host "
        f"{report.host_tokens_per_rank or 0:,} tokens/rank",
        f"  load      {load_text(report.metrics)}",
        f"  GPUs      {gpus or 'none reported'}",
    ]
    last = report.last_operation
    if last is not None:
        lines.append(
            f"  last op   #{last.id} {last.kind} {last.state}, by {last.actor} at {hhmm(last.at)}"
        )
    for notice in report.memory_notices[-3:]:
        lines.append(f"  memory    {hhmm(notice.at)} {notice.message}")
    if report.memory_below_floor:
        lines.append("  memory    the server's headroom is under the guard's floor now")
    if view.chart is not None:
        width, height = view.chart.size_px
        lines.append(f"  chart     {view.chart.filename} ({width}x{height}): {view.chart.alt}")
    if isinstance(view.fleet_proposal, FleetProposalReply):
        fleet = view.fleet_proposal.rollout
        lines.append(
            f"  advice    {view.evidence}: fleet proposal #{view.fleet_proposal.id} "
            f"({fleet.change} on every replica of fleet {fleet.fleet}, one by one through its "
            f"router); 'apply {view.fleet_proposal.id}' to apply it"
        )
    elif isinstance(view.fleet_proposal, FleetRefusalReply):
        refusal = view.fleet_proposal.refusal
        why = "; ".join(f"{host}: {reason}" for host, reason in refusal.reasons)
        lines.append(
            f"  advice    {view.evidence}: {refusal.change} for fleet {refusal.fleet} is "
            f"refused ({why})"
        )
    elif view.proposal is not None:
        lines.append(
            f"  advice    {view.evidence}: proposal #{view.proposal.id} "
            f"({view.proposal.plan.setting}); 'apply {view.proposal.id}' to apply it"
        )
        lines.append(f"            {view.proposal.plan.reason}")
    else:
        lines.append("  advice    none: nothing in the samples calls for a change")
    return lines


def report_reply_lines(reply: ReportReplies) -> list[str]:
    """The lines of a report or a schedule command's answer."""
    if isinstance(reply, ReportReply):
        head = [] if reply.schedule is None else [f"scheduled report #{reply.schedule.id}"]
        return head + [line for view in reply.hosts for line in _host(view)]
    if isinstance(reply, ReportScheduledReply):
        s = reply.schedule
        return [
            f"capacity reports {reply.cadence} ({reply.timezone}) to {s.channel}, schedule "
            f"#{s.id}; the first at {local_time(s.next_run_at, reply.timezone)}"
        ]
    if isinstance(reply, ReportStoppedReply):
        if not reply.stopped:
            return [f"no capacity reports were scheduled in {reply.channel}"]
        return [f"stopped {len(reply.stopped)} capacity report schedule(s) in {reply.channel}"]
    if not reply.schedules:
        return ["no capacity reports are scheduled"]
    return [
        f"#{s.id} {cadence} ({reply.timezone}) to {s.channel}, by {s.created_by}; next "
        f"{local_time(s.next_run_at, reply.timezone)}"
        for s, cadence in zip(reply.schedules, reply.cadences, strict=True)
    ]
