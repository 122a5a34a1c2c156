"""Every Slack message about fleets, as Block Kit: one message per rollout, edited in place.

A rollout as the channel sees it (a line per replica with its phase; each replica's end is also
a reply in the message's thread)::

    *Rollout #3 of fleet prod*: hicache ratio 4, applied by @ana: running
    :white_check_mark: kimi-01  done  size 20 GB/rank -> ratio 4  (out of the router 31.2 s)
    :arrows_counterclockwise: kimi-02  resizing  agent operation 7
    :hourglass: kimi-03  waiting

A fleet resize is a proposal with a line per replica (its plan's per-rank, total and budget
figures) and the same Apply and Cancel buttons as a single host's: Apply carries the proposal
number, and the core starts the whole rollout from it.
"""

from __future__ import annotations

from bot.chat.replies import (
    FleetAnswer,
    FleetProposalReply,
    FleetRefusalReply,
    FleetsReply,
    RejoinReply,
    RolloutReply,
)
from bot.chat.wording import hhmm
from bot.fleet.view import (
    ReplicaView,
    RolloutView,
    phase_label,
    replica_facts,
)
from bot.slack._blocks import SlackMessage, actions, button, context, message, section
from bot.slack.spec import APPLY_ACTION, CANCEL_ACTION
from bot.vocab import ReplicaPhase, RolloutState

__all__ = [
    "fleet_proposal",
    "fleet_refusal",
    "fleets_message",
    "rejoined",
    "replica_end",
    "rollout_message",
    "rollout_started",
]

_MARK = {
    ReplicaPhase.WAITING: ":hourglass:",
    ReplicaPhase.REMOVING: ":outbox_tray:",
    ReplicaPhase.DRAINING: ":outbox_tray:",
    ReplicaPhase.RESIZING: ":arrows_counterclockwise:",
    ReplicaPhase.ADDING: ":inbox_tray:",
    ReplicaPhase.DONE: ":white_check_mark:",
    ReplicaPhase.ROLLED_BACK: ":leftwards_arrow_with_hook:",
    ReplicaPhase.FAILED: ":x:",
    ReplicaPhase.UNCHANGED: ":heavy_minus_sign:",
}


def _phase(view: RolloutView, line: ReplicaView) -> str:
    return phase_label(view, line).replace("_", " ")


def _who(user: str) -> str:
    return f"<@{user}>"


def _line(view: RolloutView, line: ReplicaView) -> str:
    facts = replica_facts(line)
    out = None if facts.out is None else f"({facts.out})"
    detail = None if facts.detail is None else f"_{facts.detail}_"
    change = facts.change
    if change is None and line.new_config and view.change == "rollback":
        change = f"back to {line.new_config}"
    head = f"{_MARK[line.phase]} *{line.host}*  {_phase(view, line)}"
    return "  ".join([head, *(p for p in (change, facts.operation, out, detail) if p)])


def _head(view: RolloutView) -> str:
    return (
        f"*Rollout #{view.id} of fleet {view.fleet}*: {view.change}, by {_who(view.actor)}: "
        f"{view.state.value}"
    )


def rollout_message(view: RolloutView) -> SlackMessage:
    """The rollout's one message: its head, a line per replica, and once stopped what changed
    and what to type next."""
    blocks = [
        section(_head(view)),
        section("\n".join(_line(view, line) for line in view.replicas)),
    ]
    if view.state is RolloutState.STOPPED:
        undo = f", `rollback fleet {view.fleet}` undoes it" if view.undoable else ""
        blocks.append(
            context(
                f"Stopped: {view.reason}. Changed: {', '.join(view.changed) or 'none'}; "
                f"not changed: {', '.join(view.unchanged) or 'none'}. "
                f"`resume fleet {view.fleet}` carries it on{undo}."
            )
        )
    text = f"Rollout #{view.id} of fleet {view.fleet}: {view.change}, {view.state.value}"
    return message(text, blocks)


def replica_end(view: RolloutView, host: str) -> SlackMessage:
    """The thread reply when one replica's line ends (done, rolled back, failed)."""
    line = view.replica(host)
    text = f"{host} {_phase(view, line)} (rollout #{view.id} of fleet {view.fleet})"
    return message(text, [section(_line(view, line))])


def rollout_started(reply: RolloutReply) -> SlackMessage:
    verb = "resumed" if reply.resumed else "started"
    text = f"Rollout #{reply.view.id} of fleet {reply.view.fleet} {verb}: {reply.view.change}"
    return message(text, [context(text)])


def _proposal_blocks(reply: FleetProposalReply) -> list[dict[str, object]]:
    view = reply.rollout
    lines = []
    for line in view.replicas:
        now = f"{line.old_config} -> " if line.old_config else ""
        lines.append(f"*{line.host}*  {now}{line.planned or line.new_config or ''}")
    return [
        section(
            f"*Proposal #{reply.id} for fleet {view.fleet}*: {view.change}, one replica at a "
            f"time out of the router (proposed by {_who(reply.proposed_by)})"
        ),
        section("\n".join(lines)),
    ]


def fleet_proposal(reply: FleetProposalReply) -> SlackMessage:
    """Every replica fits: Apply and Cancel, as for a single host."""
    value = str(reply.id)
    blocks = [
        *_proposal_blocks(reply),
        actions(
            f"proposal-{reply.id}",
            button("Apply", APPLY_ACTION, value, style="primary"),
            button("Cancel", CANCEL_ACTION, value),
        ),
        context(f"Apply re-checks every replica first. Expires {hhmm(reply.expires_at)}."),
    ]
    view = reply.rollout
    text = f"Proposal #{reply.id} for fleet {view.fleet}: {view.change} fits on every replica"
    return message(text, blocks)


def fleet_refusal(reply: FleetRefusalReply) -> SlackMessage:
    """One refusal refuses all: each refused host with its arithmetic, nothing touched."""
    refusal = reply.refusal
    lines = [f":no_entry: *{host}*: {why}" for host, why in refusal.reasons]
    refused = {host for host, _ in refusal.reasons}
    lines += [
        f":white_check_mark: *{line.host}*: {line.planned}"
        for line in refusal.replicas
        if line.host not in refused and line.planned
    ]
    text = f"Fleet {refusal.fleet}: {refusal.change} refused; no replica was touched"
    return message(text, [section(f"*{text}*"), section("\n".join(lines))])


def _fleet(answer: FleetAnswer) -> list[dict[str, object]]:
    if answer.running is not None:
        running = f"rollout #{answer.running.id} ({answer.running.change}) running"
    elif answer.stopped is not None:
        running = (
            f"rollout #{answer.stopped.id} ({answer.stopped.change}) stopped: "
            f"{answer.stopped.reason}; `resume fleet {answer.name}` retries it"
        )
    else:
        running = "no rollout running"
    lines = []
    if answer.router_problem is not None:
        lines.append(f":x: router unreachable: {answer.router_problem}")
    for host in answer.replicas:
        out = host.host in answer.out_of_router
        if host.status is None:
            where = " (out of the router)" if out else ""
            lines.append(f":x: *{host.host}*  agent unreachable ({host.problem}){where}")
        else:
            status = host.status
            place = (
                f":warning: out of the router (`fleet {answer.name} rejoin {host.host}` puts it "
                "back)"
                if out
                else "in the router"
                if answer.router_problem is None
                else "router not read"
            )
            lines.append(
                f"*{host.host}*  {status.effective or 'unknown'}  {status.server_state}  {place}"
            )
    return [
        section(f"*Fleet {answer.name}* (router {answer.router}): {running}"),
        section("\n".join(lines) or "no replica"),
    ]


def rejoined(reply: RejoinReply) -> SlackMessage:
    """Replicas put back in the router (or refused, each with what its check found)."""
    lines = []
    for found in reply.outcomes:
        if found.refused is not None:
            lines.append(f":no_entry: *{found.host}* not put back: {found.refused}")
        elif found.already:
            lines.append(f":white_check_mark: *{found.host}* already in the router ({found.url})")
        else:
            lines.append(
                f":inbox_tray: *{found.host}* back in the router ({found.url}), healthy, "
                "breaker closed"
            )
    text = f"Fleet {reply.fleet}: " + "; ".join(r.host for r in reply.outcomes)
    return message(text, [section("\n".join(lines))])


def fleets_message(reply: FleetsReply) -> SlackMessage:
    blocks = [block for answer in reply.fleets for block in _fleet(answer)]
    text = f"{len(reply.fleets)} fleet(s): " + ", ".join(a.name for a in reply.fleets)
    return message(text, blocks or [section("No fleet is configured.")])
