"""Every word of a capacity report in Slack, laid out as Block Kit (the rest of the Slack
wording is in :mod:`bot.slack.messages`; reports are kept apart to keep each module small).

A report is one message in the channel, a block group per host; each host's chart is uploaded in
that message's thread, and a recommendation is posted as an ordinary proposal (Apply/Cancel) by
:func:`bot.slack.messages.proposal`. One host, as the channel sees it::

    Capacity report at 09:00 UTC
    kimi-01: server running, SGLang 0.5.9, up 2:13:05
      hicache ratio 2 x device pool (revision 3)
    Host RAM 449.0 GB total, 237.9 available, 179.2 held by HiCache   KV device 159,274 tokens ...
    Last operation #4 resize ready, by @ana at 08:12 · chart in the thread · advice: proposal #7

``tests/slack/golden/report_*.json`` hold every kind as JSON.
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
from bot.chat.wording import count as _count
from bot.chat.wording import figure as _num
from bot.chat.wording import hhmm, load_text, local_time, uptime_text
from bot.reports import HostReport
from bot.slack._blocks import Block, SlackMessage, context, fields, message, section

__all__ = [
    "chart_title",
    "report",
    "report_scheduled",
    "report_schedules",
    "report_stopped",
]


def _who(user: str) -> str:
    # Slack user ids start with U or W; the reports' own proposer is a name, shown as is.
    return f"<@{user}>" if user[:1] in ("U", "W") and user.isalnum() else user


def _gpus(report: HostReport) -> str:
    if not report.gpus:
        return "none reported"
    return "\n".join(
        f"{g.index}: {_num(g.used_gb, 1)} / {_num(g.total_gb, 1)} GB" for g in report.gpus
    )


def _notes(view: HostReportView) -> list[str]:
    report = view.report
    notes = []
    last = report.last_operation
    if last is not None:
        notes.append(
            f"Last operation #{last.id} {last.kind} {last.state}, by {_who(last.actor)} at "
            f"{hhmm(last.at)}"
        )
    for notice in report.memory_notices[-3:]:
        notes.append(f":warning: Memory at {hhmm(notice.at)}: {notice.message}")
    if report.memory_below_floor:
        notes.append(":warning: The server's memory headroom is under the guard's floor now")
    if view.chart is not None:
        notes.append(f":chart_with_upwards_trend: chart in the thread ({view.chart.filename})")
    if isinstance(view.fleet_proposal, FleetProposalReply):
        fleet = view.fleet_proposal.rollout
        notes.append(
            f":bulb: {view.evidence}: fleet proposal #{view.fleet_proposal.id} ({fleet.change} "
            f"on every replica of fleet {fleet.fleet}, through its router) follows, with "
            "Apply/Cancel"
        )
    elif isinstance(view.fleet_proposal, FleetRefusalReply):
        refusal = view.fleet_proposal.refusal
        why = "; ".join(f"{host}: {reason}" for host, reason in refusal.reasons)
        notes.append(f":bulb: {view.evidence}: {refusal.change} for fleet {refusal.fleet} is "
                     f"refused ({why})")  # fmt: skip
    elif view.proposal is not None:
        notes.append(
            f":bulb: {view.evidence}: proposal #{view.proposal.id} "
            f"({view.proposal.plan.setting}) follows, with Apply/Cancel"
        )
    else:
        notes.append("No advice: nothing in the samples calls for a change")
    return notes


def _host_blocks(view: HostReportView) -> list[Block]:
    report = view.report
    if not report.answered:
        return [
            section(
                f":electric_plug: *{report.host}*: agent unreachable at {hhmm(report.at)} "
                f"({report.problem})"
            )
        ]
    revision = "" if report.revision is None else f" (revision {report.revision})"
    return [
        section(
            f"*{report.host}*: server {report.server_state}, SGLang {report.version or '?'}, "
            f"up {uptime_text(report.uptime_s)}\nhicache *{report.setting or 'unknown'}*{revision}"
        ),
        fields(
            [
                f"*Host RAM*\n{_num(report.ram_total_gb, 1)} GB total, "
                f"{_num(report.ram_available_gb, 1)} GB available, "
                f"{_num(report.hicache_gb, 1)} GB held by HiCache",
                f"*KV tokens*\ndevice {_count(report.device_tokens)}; host "
                f"{_count(report.host_tokens_per_rank)} per rank",
                f"*Load*\n{load_text(report.metrics)}",
                f"*GPUs*\n{_gpus(report)}",
            ]
        ),
        context(*_notes(view)),
    ]


def _summary(view: HostReportView) -> str:
    report = view.report
    if not report.answered:
        return f"{report.host}: agent unreachable"
    usage = report.metrics.token_usage if report.metrics is not None else None
    load = "" if usage is None else f", token usage {usage:.0%}"
    return f"{report.host}: {report.setting or 'hicache unknown'}{load}"


def report(reply: ReportReply) -> SlackMessage:
    """The report message: a block group per host (an unreachable host is one line); its text
    names each host's setting or that it did not answer."""
    at = hhmm(reply.hosts[0].report.at) if reply.hosts else hhmm(None)
    scheduled = "" if reply.schedule is None else f" (schedule #{reply.schedule.id})"
    head = f"*Capacity report at {at}*{scheduled}"
    blocks = [section(head)] + [b for view in reply.hosts for b in _host_blocks(view)]
    text = f"Capacity report at {at}{scheduled}: " + "; ".join(_summary(v) for v in reply.hosts)
    return message(text, blocks)


def chart_title(view: HostReportView) -> str:
    """The title of a host's chart as uploaded in the report's thread."""
    return f"Capacity of {view.report.host}, last 24 h"


def report_scheduled(reply: ReportScheduledReply) -> SlackMessage:
    s = reply.schedule
    line = (
        f"Capacity reports {reply.cadence} ({reply.timezone}) to <#{s.channel}>, schedule "
        f"#{s.id}; the first at {local_time(s.next_run_at, reply.timezone)}"
    )
    return message(line.replace(f"<#{s.channel}>", s.channel), [section(f":calendar: {line}")])


def report_stopped(reply: ReportStoppedReply) -> SlackMessage:
    if not reply.stopped:
        line = f"No capacity reports were scheduled in <#{reply.channel}>"
    else:
        ids = ", ".join(f"#{s.id}" for s in reply.stopped)
        line = f"Stopped capacity report schedule(s) {ids} in <#{reply.channel}>"
    return message(line.replace(f"<#{reply.channel}>", reply.channel), [section(line)])


def report_schedules(reply: ReportSchedulesReply) -> SlackMessage:
    if not reply.schedules:
        line = "No capacity reports are scheduled"
        return message(line, [section(line)])
    rows = [
        f"#{s.id} *{cadence}* ({reply.timezone}) to <#{s.channel}>"
        + (f" for {s.host}" if s.host else "")
        + f", by {_who(s.created_by)}; next {local_time(s.next_run_at, reply.timezone)}"
        for s, cadence in zip(reply.schedules, reply.cadences, strict=True)
    ]
    text = f"{len(rows)} capacity report schedule(s)"
    return message(text, [section(f"*{text}*"), section("\n".join(rows))])
