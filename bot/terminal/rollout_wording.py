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
    RejoinReply,
    RolloutReply,
)
from bot.chat.wording import hhmm
from bot.fleet.view import ReplicaView, RolloutView, phase_label, replica_facts
from bot.vocab import RolloutState

__all__ = ["fleet_reply_lines", "replica_end_line", "rollout_lines"]

_WIDTH = 11  # the longest phase value, "rolled_back" ("rolling back" runs one over)


def _replica(view: RolloutView, line: ReplicaView) -> str:
    facts = replica_facts(line)
    detail = None if facts.detail is None else f"({facts.detail})"
    target = None
    if facts.change is None and line.new_config and view.change == "rollback":
        target = f"back to {line.new_config}"
    parts = [facts.change or target, facts.operation, facts.out, detail]
    head = f"  {line.host}  {phase_label(view, line):<{_WIDTH}}"
    return "  ".join([head, *(p for p in parts if p)]).rstrip()


def rollout_lines(view: RolloutView) -> list[str]:
    """The rollout's block: its head, then each replica's line in rollout order."""
    head = f"Rollout #{view.id} of fleet {view.fleet}: {view.change} ({view.actor}), "
    head += view.state.value
    lines = [head, *(_replica(view, line) for line in view.replicas)]
    if view.state is RolloutState.STOPPED:
        changed = ", ".join(view.changed) or "none"
        unchanged = ", ".join(view.unchanged) or "none"
        advice = f"  'resume fleet {view.fleet}' carries it on"
        if view.undoable:
            advice += f", 'rollback fleet {view.fleet}' undoes it"
        lines += [
            f"  stopped: {view.reason}",
            f"  changed: {changed}; not changed: {unchanged}",
            advice,
        ]
    return lines


def replica_end_line(view: RolloutView, host: str) -> str:
    line = view.replica(host)
    return f"rollout #{view.id} of fleet {view.fleet}: {host} {phase_label(view, line)}"


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
    if answer.running is not None:
        running = f"rollout #{answer.running.id} ({answer.running.change}) running"
    elif answer.stopped is not None:
        running = (
            f"rollout #{answer.stopped.id} ({answer.stopped.change}) stopped: "
            f"{answer.stopped.reason}; 'resume fleet {answer.name}' retries it"
        )
    else:
        running = "no rollout running"
    lines = [f"fleet {answer.name} (router {answer.router}): {running}"]
    if answer.router_problem is not None:
        lines.append(f"  router unreachable: {answer.router_problem}")
    for host in answer.replicas:
        out = host.host in answer.out_of_router
        if host.status is None:
            where = "  (out of the router)" if out else ""
            lines.append(f"  {host.host}  agent unreachable ({host.problem}){where}")
        else:
            status = host.status
            place = (
                f"OUT OF THE ROUTER ('fleet {answer.name} rejoin {host.host}' puts it back)"
                if out
                else "in the router"
                if answer.router_problem is None
                else "router not read"
            )
            lines.append(
                f"  {host.host}  {status.effective or 'unknown'}  server {status.server_state}"
                f"  {place}"
            )
    return lines


def _rejoined(reply: RejoinReply) -> list[str]:
    lines = []
    for found in reply.outcomes:
        if found.refused is not None:
            lines.append(f"{found.host}: not put back in fleet {reply.fleet}'s router: "
                         f"{found.refused}")  # fmt: skip
        elif found.already:
            lines.append(f"{found.host}: already in fleet {reply.fleet}'s router ({found.url})")
        else:
            lines.append(
                f"{found.host}: back in fleet {reply.fleet}'s router ({found.url}), healthy, "
                "breaker closed"
            )
    return lines


def fleet_reply_lines(
    reply: FleetProposalReply | FleetRefusalReply | RolloutReply | FleetsReply | RejoinReply,
) -> list[str]:
    if isinstance(reply, RejoinReply):
        return _rejoined(reply)
    if isinstance(reply, FleetProposalReply):
        return _proposal(reply)
    if isinstance(reply, FleetRefusalReply):
        return _refusal(reply)
    if isinstance(reply, RolloutReply):
        verb = "resumed" if reply.resumed else "started"
        return [f"rollout #{reply.view.id} of fleet {reply.view.fleet} {verb}"]
    return [line for answer in reply.fleets for line in _fleet(answer)]
