"""Every word the Slack app shows, laid out as Block Kit: the one module to review for wording.

The figures and sentences come from the core (the terminal shows the same ones); this module
only lays them out for Slack. Each function returns a :class:`SlackMessage` whose fallback
``text`` reads well in a notification preview. A proposal that fits, as the channel sees it::

    Proposal #12 for kimi-01: hicache ratio 2 x device pool -> ratio 4 x device pool
      (asked by @ben)
    Per rank 637,097 tokens, 44.77 GB    All ranks 8 x 44.77 GB = 358.2 GB
    RAM after the stop 596.0 GB free     Budget 545.3 GB    Spare 187.1 GB ...
    FITS: ratio 4 needs 8 ranks x 44.77 GB = 358.2 GB; ...
    [Apply] [Cancel]
    Apply re-checks the host first. Expires 10:15 UTC.

``tests/slack/golden/`` holds every kind as JSON.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from bot.agent_json import AgentPlan, AgentStatus
from bot.chat.audit import HistoryEntry, Watch
from bot.chat.progress import Cause, PhaseDone, ProgressView
from bot.chat.replies import (
    HostAnswer,
    HostsReply,
    MemoryNoticeReply,
    ProposalReply,
    StatusReply,
)
from bot.chat.wording import PHASE_LABEL, hhmm, history_note, rollback_head, uptime_text
from bot.chat.wording import clock as _clock
from bot.chat.wording import count as _count
from bot.chat.wording import doing as _doing
from bot.chat.wording import figure as _num
from bot.slack._blocks import (
    Block,
    SlackMessage,
    actions,
    button,
    code,
    context,
    fields,
    message,
    section,
)
from bot.slack.spec import APPLY_ACTION, CANCEL_ACTION
from bot.vocab import EventPhase, OperationState

__all__ = [
    "HISTORY_PAGE_ROWS",
    "NOT_A_MEMBER_ERRORS",
    "cancelled_line",
    "closed_proposal",
    "command_failed",
    "ephemeral",
    "expired_line",
    "help_message",
    "history_pages",
    "hosts_message",
    "memory_notice",
    "notice",
    "post_failed",
    "progress",
    "proposal",
    "status_card",
    "unreachable",
    "void_line",
]

HISTORY_PAGE_ROWS = 20  # rows of one history message; more go to its thread

# A Slack user or bot user id (U0BEN, W0123ABC); anything else is a name, never a mention.
_SLACK_ID = re.compile(r"[UW][A-Z0-9]{2,}")

_NOTICE = {
    OperationState.STALLED: ":warning: stalled: the server lives but its log has not moved",
    OperationState.ROLLING_BACK: ":x: failed to start; rolling back to the last config that ran",
    OperationState.READY: ":white_check_mark: is ready",
    OperationState.FAILED: ":x: failed",
    OperationState.ROLLED_BACK: ":leftwards_arrow_with_hook: was rolled back",
}


def _who(user: str | None) -> str:
    """A mention of a Slack user id; anything else (a name the bot gave itself, an agent's actor)
    in plain text, since ``<@name>`` shows Slack's "unknown user"."""
    if not user:
        return "someone"
    return f"<@{user}>" if _SLACK_ID.fullmatch(user) else user


def _duration(seconds: float) -> str:
    """``12.0 s`` under a minute and a half, else ``~10 min``."""
    return f"{seconds:.1f} s" if seconds < 90 else f"~{round(seconds / 60)} min"


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"ETA ~{int(seconds)} s" if seconds < 90 else f"ETA ~{round(seconds / 60)} min"


# -- proposals -------------------------------------------------------------------------------


def _proposal_head(reply: ProposalReply) -> str:
    if reply.rollback is not None:
        return (
            f"*Proposal #{reply.id}*: {rollback_head(reply.rollback)}  "
            f"(asked by {_who(reply.proposed_by)})"
        )
    now = f"{reply.current} -> " if reply.current else ""
    return (
        f"*Proposal #{reply.id} for {reply.host}*: hicache {now}{reply.plan.setting}  "
        f"(asked by {_who(reply.proposed_by)})"
    )


def _plan_fields(plan: AgentPlan) -> Block:
    expected = plan.expected_startup_s
    startup = "no estimate yet" if expected is None else _duration(expected)
    return fields(
        [
            f"*Per rank*\n{_count(plan.per_rank_tokens)} tokens, {_num(plan.per_rank_gb)} GB",
            f"*All ranks*\n{plan.ranks} x {_num(plan.per_rank_gb)} GB = "
            f"{_num(plan.total_gb, 1)} GB",
            f"*RAM after the stop*\n{_num(plan.free_after_stop_gb, 1)} GB free",
            f"*Budget*\n{_num(plan.budget_gb, 1)} GB",
            f"*Spare*\n{_num(plan.headroom_left_gb, 1)} GB",
            f"*Expected startup*\n{startup}",
        ]
    )


def _proposal_blocks(reply: ProposalReply) -> list[Block]:
    plan = reply.plan
    verdict = f"*FITS*: {plan.reason}" if plan.fits else f"*REFUSED*: {plan.reason}"
    blocks = [section(_proposal_head(reply)), _plan_fields(plan), section(verdict)]
    if plan.warnings:
        blocks.append(context(*(f":warning: {warning}" for warning in plan.warnings)))
    return blocks


def proposal(reply: ProposalReply) -> SlackMessage:
    """The proposal posted in the channel: Apply and Cancel when it fits; a refused one has no
    buttons and says why and what would fit (the planner's sentence carries both)."""
    plan = reply.plan
    blocks = _proposal_blocks(reply)
    if plan.fits:
        value = str(reply.id)
        blocks += [
            actions(
                f"proposal-{reply.id}",
                button("Apply", APPLY_ACTION, value, style="primary"),
                button("Cancel", CANCEL_ACTION, value),
            ),
            context(f"Apply re-checks the host first. Expires {hhmm(reply.expires_at)}."),
        ]
        text = f"Proposal #{reply.id} for {reply.host}: {plan.setting} fits ({plan.reason})"
        if reply.rollback is not None:
            text = f"Proposal #{reply.id}: {rollback_head(reply.rollback)}; fits ({plan.reason})"
    else:
        blocks.append(context("Nothing to apply: ask again with a value that fits."))
        text = f"Proposal #{reply.id} for {reply.host}: {plan.setting} refused ({plan.reason})"
    return message(text, blocks)


def closed_proposal(reply: ProposalReply | None, proposal_id: int, why: str) -> SlackMessage:
    """The proposal with its buttons replaced by ``why`` (expired, void, cancelled); without the
    original reply (a restarted bot), the line alone."""
    line = f"Proposal #{proposal_id} {why}"
    blocks = [] if reply is None else _proposal_blocks(reply)
    return message(line, [*blocks, context(f":no_entry_sign: {line}")])


def expired_line(at: datetime | None) -> str:
    return f"expired at {hhmm(at)}: ask for the resize again"


def void_line(host: str, at: datetime | None) -> str:
    return f"is void: another operation started on {host} at {hhmm(at)}; ask again"


def cancelled_line(by: str) -> str:
    return f"was cancelled by {_who(by)}"


# -- an operation ----------------------------------------------------------------------------


def _title(watch: Watch) -> str:
    who = [f"applied by {_who(watch.applied_by)}"] if watch.applied_by else []
    if watch.proposed_by:
        who.append(f"proposed by {_who(watch.proposed_by)}")
    return f"*{watch.title}*" + (f" ({', '.join(who)})" if who else "")


_DONE_LABEL = {
    EventPhase.STOPPING: "stopped the old server",
    EventPhase.WAITING_GPUS: "GPUs free",
    EventPhase.STARTING: "process started",
}


def _done_line(done: PhaseDone) -> str:
    data = done.data
    if done.phase is EventPhase.KV_POOL and "device_tokens" in data:
        what = f"KV pool: {int(data['device_tokens']):,} device tokens"
    elif done.phase is EventPhase.HOST_POOL and "host_gb_per_rank" in data:
        what = (
            f"host pool: {float(data['host_gb_per_rank']):.2f} GB per rank x "
            f"{data.get('ranks', '?')} ranks, pinned"
        )
    else:
        what = _DONE_LABEL.get(done.phase) or PHASE_LABEL.get(done.phase, str(done.phase))
    return f"✓ {what} ({_duration(done.seconds)})"


def _bar_line(view: ProgressView) -> str:
    state = ""
    if view.stalled:
        state = "  *STALLED*"
    elif view.state is OperationState.ROLLING_BACK:
        state = "  *ROLLING BACK*"
    parts = [f"`{view.bar}` {view.percent}%", _doing(view), f"elapsed {_clock(view.elapsed_s)}"]
    eta = _eta(view.eta_s)
    return "  ·  ".join([*parts, *([eta] if eta else [])]) + state


def _final_fields(view: ProgressView) -> Block | None:
    final = view.final
    if final is None or final.startup_s is None:  # no start to report (a live change)
        return None
    return fields(
        [
            f"*Device tokens*\n{_count(final.device_tokens)} per rank",
            f"*Host tokens*\n{_count(final.host_tokens_per_rank)} per rank",
            f"*GB per rank*\n{_num(final.host_gb_per_rank)} logged, "
            f"{_num(final.planned_gb_per_rank)} planned",
            f"*Host pool total*\n{final.ranks or '?'} ranks, {_num(final.host_gb_total, 1)} GB",
            f"*Startup*\n{_num(final.startup_s, 0)} s"
            + ("" if final.startup_s is None else f" ({_duration(final.startup_s)})"),
        ]
    )


def _end_line(view: ProgressView) -> str:
    if view.state is OperationState.READY:
        return ":white_check_mark: *READY*: the server answers and reports the new settings"
    if view.state is OperationState.ROLLED_BACK:
        cause = view.rollback
        why = f" ({cause.kind})" if cause is not None else ""
        return (
            f":leftwards_arrow_with_hook: *ROLLED BACK*{why}: the config that ran before runs again"
        )
    cause = view.failure
    why = f" ({cause.kind})" if cause is not None else ""
    return f":x: *FAILED*{why}: {view.message}"


def progress(watch: Watch, view: ProgressView) -> SlackMessage:
    """The one live message of an operation, edited in place until its final figures."""
    blocks = [section(_title(watch))]
    if view.finished:
        blocks.append(section(_end_line(view)))
        final = _final_fields(view)
        if final is not None:
            blocks.append(final)
        text = f"{watch.title}: {view.state.value.replace('_', ' ')}"
    else:
        blocks.append(section(_bar_line(view)))
        text = f"{watch.title}: {view.percent}% {_doing(view)}"
    if view.rollback is not None and not view.finished:
        blocks.append(section(f":x: start failed: {view.rollback.kind}; rolling back"))
    done = [_done_line(d) for d in view.done if d.phase is not EventPhase.PLANNED]
    if done:
        blocks.append(context("\n".join(done)))
    return message(text, blocks)


def _cause_blocks(cause: Cause) -> list[Block]:
    where = f" in {cause.phase}" if cause.phase else ""
    blocks = [section(f"*Cause*{where}: `{cause.kind}` {cause.message}".rstrip())]
    if cause.lines:
        blocks.append(section("SGLang's decisive lines:\n" + code(cause.lines, 2900)))
    return blocks


def notice(people: tuple[str, ...], watch: Watch, view: ProgressView) -> SlackMessage:
    """The thread reply that tells the proposer and applier how it went; a failure's decisive
    log lines go here, trimmed under Slack's limits, never into the edited message."""
    to = " ".join(_who(person) for person in people)
    word = _NOTICE.get(view.state, view.state.value)
    head = f"{to} {watch.title} {word}".strip()
    blocks = [section(head)]
    final = _final_fields(view) if view.state is OperationState.READY else None
    if final is not None:
        blocks.append(final)
    cause = view.failure or view.rollback
    if view.state is not OperationState.READY and cause is not None:
        blocks += _cause_blocks(cause)
    plain = head.replace("*", "")
    return message(plain, blocks)


def unreachable(watch: Watch, since: datetime) -> SlackMessage:
    line = f"{watch.host}: agent unreachable since {hhmm(since)}; still watching"
    return message(line, [context(f":electric_plug: {line}")])


def memory_notice(reply: MemoryNoticeReply) -> SlackMessage:
    """The post-ready watch's notice, once per crossing, in the channel of the host's last
    operation: the headroom, the floor, and that nothing was restarted."""
    notice = reply.notice
    about = "" if reply.operation_id is None else f" (last operation #{reply.operation_id})"
    head = f":warning: *{reply.host}*: memory notice at {hhmm(notice.at)}{about}"
    figures = (
        f"headroom {notice.headroom_gb:.1f} GB ({notice.where}), floor {notice.floor_gb:.1f} GB"
    )
    if notice.cgroup_limit_gb is not None:
        figures += f", cgroup limit {notice.cgroup_limit_gb:.1f} GB"
    text = f"{reply.host}: memory notice at {hhmm(notice.at)}: {notice.message}"
    return message(text, [section(f"{head}\n{notice.message}"), context(figures)])


# -- other commands --------------------------------------------------------------------------


def _gpus(status: AgentStatus) -> str:
    if not status.gpus:
        return f"unknown ({status.gpus_reason or 'no GPU facts'})"
    used = [float(gpu.get("memory_used_gb") or 0) for gpu in status.gpus]
    total = float(status.gpus[0].get("memory_total_gb") or 0)
    return f"{len(status.gpus)} x {total:.1f} GB, {min(used):.1f}-{max(used):.1f} GB used"


def _strays(status: AgentStatus) -> list[str]:
    """GPU processes while no server runs: whatever holds GPU memory then is in the way."""
    if status.server_state.running:
        return []
    return [
        f"GPU {gpu.get('index')}: pid {proc.get('pid')} {proc.get('name')} "
        f"({_num(proc.get('used_gb'), 1)} GB)"
        for gpu in status.gpus
        for proc in gpu.get("processes") or ()
    ]


def _silent(answer: HostAnswer) -> str:
    return f"*{answer.host}*: agent unreachable since {hhmm(answer.since)} ({answer.problem})"


def _status_blocks(answer: HostAnswer) -> list[Block]:
    status = answer.status
    if status is None:
        return [section(f":electric_plug: {_silent(answer)}")]
    default = " (default)" if answer.default else ""
    op = status.operation
    running = "none" if op is None else f"{op.kind} #{op.id} by {_who(op.actor)}, {op.state}"
    blocks = [
        section(
            f"*{answer.host}*{default}: server {status.server_state}, health "
            f"{status.health_code or 'none'}, SGLang {status.version or '?'}, up "
            f"{uptime_text(status.uptime_s)}\nhicache *{status.effective or 'unknown'}*"
            + _live_storage(status)
        ),
        fields(
            [
                f"*KV device*\n{_count(status.device_tokens)} tokens/rank",
                f"*KV host*\n{_count(status.host_tokens_per_rank)} tokens, "
                f"{_num(status.host_gb_per_rank)} GB/rank x {status.ranks or '?'}",
                f"*Host RAM*\n{_num(status.ram_available_gb, 1)} of "
                f"{_num(status.ram_total_gb, 1)} GB free; "
                f"{_num(status.ram_server_held_gb, 1)} GB held by the server"
                + (
                    ""
                    if status.ram_cgroup_limit_from is None
                    else f"; cgroup {status.ram_cgroup_limit_from} limit "
                    f"{_num(status.ram_cgroup_limit_gb, 1)} GB, "
                    f"{_num(status.ram_headroom_gb, 1)} GB headroom"
                ),
                f"*GPUs*\n{_gpus(status)}",
                f"*Operation*\n{running}",
            ]
        ),
    ]
    notes = [f":warning: {p}" for p in status.problems] + [
        f":warning: stray {s}" for s in _strays(status)
    ]
    if notes:
        blocks.append(context(*notes))
    return blocks


def _live_storage(status: AgentStatus) -> str:
    """ "\nstorage live *file, write back, prefetch timeout*; command line ...", or ""."""
    storage = status.storage
    if storage is None:
        return ""
    live = storage.live.phrase() if storage.live else f"unknown ({storage.problem or 'no answer'})"
    note = " (differs: a restart goes back to the command line)" if storage.differs else ""
    return f"\nstorage live *{live}*; command line {storage.command_line.phrase()}{note}"


def status_card(reply: StatusReply) -> SlackMessage:
    blocks = [block for answer in reply.hosts for block in _status_blocks(answer)]
    summary = "; ".join(
        f"{a.host}: {a.status.effective or 'hicache unknown'}, server {a.status.server_state}"
        if a.status is not None
        else f"{a.host}: agent unreachable"
        for a in reply.hosts
    )
    return message(f"status: {summary}", blocks)


def hosts_message(reply: HostsReply) -> SlackMessage:
    lines = []
    for answer in reply.hosts:
        default = " (default)" if answer.default else ""
        if answer.status is None:
            lines.append(f":electric_plug: {_silent(answer)}  {answer.url}")
        else:
            lines.append(
                f":large_green_circle: *{answer.host}*{default}: answers; server "
                f"{answer.status.server_state}, {answer.status.effective or 'hicache unknown'}  "
                f"{answer.url}"
            )
    return message(f"{len(reply.hosts)} agent(s) configured", [section("\n".join(lines))])


def _history_rows(entries: Sequence[HistoryEntry]) -> list[str]:
    rows = []
    for e in entries:
        startup = "" if e.startup_s is None else f"{e.startup_s:.0f} s"
        rows.append(
            f"{e.id:>4}  {e.host:<10} {e.setting:<18} {e.outcome:<12} {e.proposed_by or '-':<11} "
            f"{e.applied_by or '-':<11} {_num(e.planned_gb_per_rank):>7} "
            f"{_num(e.logged_gb_per_rank):>7} {startup:>7}{history_note(e)}"
        )
    return rows


_HISTORY_HEAD = (
    f"{'rev':>4}  {'host':<10} {'setting':<18} {'outcome':<12} {'proposed':<11} "
    f"{'applied':<11} {'GB plan':>7} {'logged':>7} {'startup':>7}"
)


def history_pages(host: str | None, entries: Sequence[HistoryEntry]) -> list[SlackMessage]:
    """The audit as code-block tables, HISTORY_PAGE_ROWS rows a message: the first page goes
    to the channel, the others to its thread."""
    where = f" of {host}" if host else ""
    if not entries:
        return [
            message(
                f"history{where}: no revisions recorded yet",
                [section("No revisions recorded yet.")],
            )
        ]
    pages = [entries[i : i + HISTORY_PAGE_ROWS] for i in range(0, len(entries), HISTORY_PAGE_ROWS)]
    out = []
    for number, page in enumerate(pages, 1):
        head = f"*History{where}*: {len(entries)} newest revisions (page {number}/{len(pages)})"
        table = code([_HISTORY_HEAD, *_history_rows(page)])
        out.append(
            message(f"history{where}, page {number}/{len(pages)}", [section(head), section(table)])
        )
    return out


def help_message(lines: Sequence[str]) -> SlackMessage:
    return message("kimi-ops commands: /kimi help", [section(code(lines))])


def ephemeral(kind: str, text: str, usage: str | None = None) -> SlackMessage:
    """An error, a refusal, a usage line or a note, for the sender only."""
    icon = {"error": ":x:", "refused": ":no_entry:", "usage": ":grey_question:"}.get(kind, "")
    head = f"{icon} *{kind}*: {text}" if icon else text
    blocks = [section(head)]
    if usage is not None:
        blocks.append(context(f"usage: `/kimi {usage}`"))
    plain = f"{kind}: {text}" if icon else text
    return message(plain + (f" (usage: /kimi {usage})" if usage else ""), blocks)


def command_failed(text: str, exc: BaseException) -> str:
    """What a person reads when their command failed inside kimi-ops (the log has the rest)."""
    shown = text if len(text) <= 80 else text[:80] + "..."
    why = str(exc) or type(exc).__name__
    return (
        f"`{shown}` failed inside kimi-ops ({type(exc).__name__}: {why[:300]}). The bot's log "
        "has the traceback; check `status` or `fleets` before trying again"
    )


#: Slack's errors for a channel the bot may not post in: the one case an invite fixes.
NOT_A_MEMBER_ERRORS = frozenset({"not_in_channel", "channel_not_found"})


def post_failed(channel: str, error: str, status: int) -> SlackMessage:
    """Why a message was not posted in ``channel``, from Slack's ``error`` code and HTTP
    ``status``: only a channel the bot is not in asks for an invite; a rate limit or a fault on
    Slack's side says so, as inviting the bot would not help."""
    where = f"could not post in <#{channel}>"
    if error in NOT_A_MEMBER_ERRORS:
        text = f"{where} ({error}); invite the bot there (/invite @kimi-ops)"
    elif status == 429 or error == "ratelimited":
        text = (
            f"{where}: Slack is rate limiting the bot (HTTP 429, {error}) and kept refusing "
            "after its retries; nothing was posted, try again in a minute"
        )
    elif status >= 500:
        text = (
            f"{where}: Slack failed on its side (HTTP {status}, {error}); nothing was posted, "
            "try again in a minute"
        )
    else:
        text = f"{where}: Slack refused the message (HTTP {status}, {error}); nothing was posted"
    return ephemeral("error", text)
