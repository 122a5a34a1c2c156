"""The demo's on-call session, step by step, each checked by the core's typed reply.

Two people on one simulated host: ana brings the server up at ``--hicache-size 48``, ben reads
``--hicache-size`` as a total and asks for 300 GB (refused: 8 ranks x 300 GB), then proposes
ratio 4, which ana applies (the policy wants a second person), and the audit shows all three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.chat.core import ChatCore
from bot.chat.policy import Actor
from bot.chat.replies import HistoryReply, OperationReply, ProposalReply, Reply, StatusReply
from bot.demo import _wording as wording
from bot.store import RevisionOutcome
from bot.terminal.front import TerminalFrontEnd
from bot.vocab import OperationState, ServerState

__all__ = ["ANA", "BEN", "StepResult", "play"]

ANA, BEN = Actor("ana"), Actor("ben")

# Check one reply (and, for an operation, the state it ended in): None when it did what it
# should, else what went wrong.
_Check = Callable[[Reply, OperationState | None], str | None]


@dataclass(frozen=True)
class StepResult:
    """One step of the session: what was typed, by whom, and what went wrong (None: nothing)."""

    actor: str
    text: str
    problem: str | None


def _ready(reply: Reply, final: OperationState | None) -> str | None:
    if not isinstance(reply, OperationReply):
        return f"expected an operation, got {type(reply).__name__}"
    return None if final is OperationState.READY else f"the operation ended {final}"


def _running(reply: Reply, final: OperationState | None) -> str | None:
    if not isinstance(reply, StatusReply) or reply.hosts[0].status is None:
        return f"expected the host's status, got {type(reply).__name__}"
    status = reply.hosts[0].status
    if status.server_state is not ServerState.RUNNING or status.health_code != 200:
        return f"the server is {status.server_state} (/health {status.health_code}), not serving"
    if status.hicache is None or status.hicache.size_gb != 48:
        return f"the server runs {status.hicache}, not --hicache-size 48"
    return None


def _refused(reply: Reply, final: OperationState | None) -> str | None:
    if not isinstance(reply, ProposalReply):
        return f"expected a refused proposal, got {type(reply).__name__}"
    return "the planner let 8 x 300 GB through" if reply.plan.fits else None


def _fits(reply: Reply, final: OperationState | None) -> str | None:
    if not isinstance(reply, ProposalReply):
        return f"expected a proposal, got {type(reply).__name__}"
    return None if reply.plan.fits else f"ratio 4 was refused: {reply.plan.reason}"


def _audit(reply: Reply, final: OperationState | None) -> str | None:
    if not isinstance(reply, HistoryReply):
        return f"expected the history, got {type(reply).__name__}"
    outcomes = [entry.outcome for entry in reply.entries]
    expected = [RevisionOutcome.READY, RevisionOutcome.REFUSED, RevisionOutcome.READY]
    if outcomes != expected:
        return f"the audit holds {outcomes}, not {expected} (newest first)"
    return None


def play(core: ChatCore, front: TerminalFrontEnd) -> list[StepResult]:
    """Type each step's command as its person, wait for any operation to end, check the reply.
    Stops at the first step that went wrong (the later ones build on it)."""
    steps: list[tuple[Actor, str, _Check]] = [
        (ANA, "restart", _ready),
        (ANA, "status", _running),
        (BEN, "resize size 300", _refused),
        (BEN, "resize ratio 4", _fits),
        (ANA, "apply {proposal}", _ready),
        (BEN, "history", _audit),
    ]
    results: list[StepResult] = []
    proposal: int | None = None
    for actor, template, check in steps:
        text = template.format(proposal=proposal)
        print(wording.typed(actor.id, text), flush=True)
        reply = core.handle(text, actor)
        final = None
        if isinstance(reply, OperationReply):
            view = core.wait(reply.watch)
            if view is not None:
                front.final(reply.watch, view)
                final = view.state
        if isinstance(reply, ProposalReply):
            proposal = reply.id
        results.append(StepResult(actor.id, text, check(reply, final)))
        if results[-1].problem is not None:
            break
    return results
