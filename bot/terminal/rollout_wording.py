"""The terminal's lines for fleets: one block per rollout, a line per replica with its phase::

Rollout #3 of fleet prod: hicache ratio 4 (U0ANA), running
  kimi-01  done        size 20 GB/rank -> ratio 4   out of the router 31.2 s
  kimi-02  resizing    agent operation 7
  kimi-03  waiting
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
from bot.fleet.view import ReplicaView, RolloutView, replica_facts
from bot.vocab import RolloutState

__all__ = ["fleet_reply_lines", "replica_end_line", "rollout_lines"]

_WIDTH = 11  # the longest phase, "rolled_back"


def _replica(line: ReplicaView) -> str:
    facts = replica_facts(line)
    detail = None if facts.detail is None else f"({facts.detail})"
    parts = [facts.change, facts.operation, facts.out, detail]
    head = f"  {line.host}  {line.phase.value:<{_WIDTH}}"
    return "  ".join([head, *(p for p in parts if p)]).rstrip()


def rollout_lines(view: RolloutView) -> list[str]:
    """The rollout's block: its head, then each replica's line in rollout order."""
    head = f"Rollout #{view.id} of fleet {view.fleet}: {view.change} ({view.actor}), "
    head += view.state.value
    lines = [head, *(_replica(line) for line in view.replicas)]
    if view.state is RolloutState.STOPPED:
        changed = ", ".join(view.changed) or "none"
        unchanged = ", ".join(view.unchanged) or "none"
        lines += [
            f"  stopped: {view.reason}",
            f"  changed: {changed}; not changed: {unchanged}",
            f"  'resume fleet {view.fleet}' carries it on, 'rollback fleet {view.fleet}' undoes it",
        ]
    return lines


def replica_end_line(view: RolloutView, host: str) -> str:
    line = view.replica(host)
    return f"rollout #{view.id} of fleet {view.fleet}: {host} {line.phase.value}"


def _proposal(reply: FleetProposalReply) -> list[str]:
    view = reply.rollout
    lines = [
        f"Proposal #{reply.id} for fleet {view.fleet}: {view.change}, one replica at a time "
        f"(proposed by {reply.proposed_by})"
    ]
    for line in view.replicas:
        now = f"{line.old_config} -> " if line.old_config else ""
        lines.append(f"  {line.host}  {now}{line.planned or line.new_config or ''}")
    lines.append(f"apply with: kimi-ops chat apply {reply.id}   (expires {hhmm(reply.expires_at)})")
    return lines


def _refusal(reply: FleetRefusalReply) -> list[str]:
    refusal = reply.refusal
    lines = [f"REFUSED: fleet {refusal.fleet} {refusal.change}; no replica was touched"]
    lines += [f"  {host}: {why}" for host, why in refusal.reasons]
    refused = {host for host, _ in refusal.reasons}
    lines += [
        f"  {line.host}  fits: {line.planned}"
        for line in refusal.replicas
        if line.host not in refused and line.planned
    ]
    return lines


def _fleet(answer: FleetAnswer) -> list[str]:
    running = (
        "no rollout running"
        if answer.running is None
        else (f"rollout #{answer.running.id} ({answer.running.change}) running")
    )
    lines = [f"fleet {answer.name} (router {answer.router}): {running}"]
    for host in answer.replicas:
        if host.status is None:
            lines.append(f"  {host.host}  agent unreachable ({host.problem})")
        else:
            status = host.status
            lines.append(
                f"  {host.host}  {status.effective or 'unknown'}  server {status.server_state}"
            )
    return lines


def fleet_reply_lines(
    reply: FleetProposalReply | FleetRefusalReply | RolloutReply | FleetsReply,
) -> list[str]:
    if isinstance(reply, FleetProposalReply):
        return _proposal(reply)
    if isinstance(reply, FleetRefusalReply):
        return _refusal(reply)
    if isinstance(reply, RolloutReply):
        verb = "resumed" if reply.resumed else "started"
        return [f"rollout #{reply.view.id} of fleet {reply.view.fleet} {verb}"]
    return [line for answer in reply.fleets for line in _fleet(answer)]
