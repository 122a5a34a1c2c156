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
    RolloutReply,
)
from bot.chat.wording import hhmm
from bot.fleet.view import (
    ReplicaView,
    RolloutView,
    replica_facts,
)
from bot.slack._blocks import SlackMessage, actions, button, context, message, section
from bot.slack.spec import APPLY_ACTION, CANCEL_ACTION
from bot.vocab import ReplicaPhase, RolloutState

__all__ = [
    "fleet_proposal",
    "fleet_refusal",
    "fleets_message",
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
_PHASE = {phase: phase.value.replace("_", " ") for phase in ReplicaPhase}


def _who(user: str) -> str:
    return f"<@{user}>"


def _line(line: ReplicaView) -> str:
    facts = replica_facts(line)
    out = None if facts.out is None else f"({facts.out})"
    detail = None if facts.detail is None else f"_{facts.detail}_"
    head = f"{_MARK[line.phase]} *{line.host}*  {_PHASE[line.phase]}"
    return "  ".join([head, *(p for p in (facts.change, facts.operation, out, detail) if p)])


def _head(view: RolloutView) -> str:
    return (
        f"*Rollout #{view.id} of fleet {view.fleet}*: {view.change}, by {_who(view.actor)}: "
        f"{view.state.value}"
    )


def rollout_message(view: RolloutView) -> SlackMessage:
    """The rollout's one message: its head, a line per replica, and once stopped what changed
    and what to type next."""
    blocks = [section(_head(view)), section("\n".join(_line(line) for line in view.replicas))]
    if view.state is RolloutState.STOPPED:
        blocks.append(
            context(
                f"Stopped: {view.reason}. Changed: {', '.join(view.changed) or 'none'}; "
                f"not changed: {', '.join(view.unchanged) or 'none'}. "
                f"`resume fleet {view.fleet}` carries it on, "
                f"`rollback fleet {view.fleet}` undoes it."
            )
        )
    text = f"Rollout #{view.id} of fleet {view.fleet}: {view.change}, {view.state.value}"
    return message(text, blocks)


def replica_end(view: RolloutView, host: str) -> SlackMessage:
    """The thread reply when one replica's line ends (done, rolled back, failed)."""
    line = view.replica(host)
    text = f"{host} {_PHASE[line.phase]} (rollout #{view.id} of fleet {view.fleet})"
    return message(text, [section(_line(line))])


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
    running = (
        "no rollout running"
        if answer.running is None
        else f"rollout #{answer.running.id} ({answer.running.change}) running"
    )
    lines = []
    for host in answer.replicas:
        if host.status is None:
            lines.append(f":x: *{host.host}*  agent unreachable ({host.problem})")
        else:
            status = host.status
            lines.append(f"*{host.host}*  {status.effective or 'unknown'}  {status.server_state}")
    return [
        section(f"*Fleet {answer.name}* (router {answer.router}): {running}"),
        section("\n".join(lines) or "no replica"),
    ]


def fleets_message(reply: FleetsReply) -> SlackMessage:
    blocks = [block for answer in reply.fleets for block in _fleet(answer)]
    text = f"{len(reply.fleets)} fleet(s): " + ", ".join(a.name for a in reply.fleets)
    return message(text, blocks or [section("No fleet is configured.")])
