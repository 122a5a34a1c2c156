"""What a rollout looks like to a front end: one view, a line per replica with its phase.

The core hands a :class:`RolloutView` to the front end on every phase change (as it hands an
operation's ``ProgressView``); the terminal lays it out in one block, Slack in one message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bot.store.records import RolloutReplicaRecord as ReplicaView
from bot.vocab import FINAL_ROLLOUT_STATES, OperationKind, ReplicaPhase, RolloutState

__all__ = [
    "ReplicaFacts",
    "ReplicaView",
    "RolloutView",
    "phase_label",
    "replica_facts",
]

# A replica's line is the store's record itself (its phase, plan, operation, revision, old and
# new config): one type from the runner to the database and back, so nothing is copied field by
# field on each save.

CHANGED_PHASES = frozenset({ReplicaPhase.DONE})


@dataclass(frozen=True)
class RolloutView:
    """A rollout: what it does (``change``: "hicache ratio 4", "restart", "rollback") to which
    fleet, and each replica's line."""

    id: int
    fleet: str
    change: str
    actor: str
    state: RolloutState
    replicas: tuple[ReplicaView, ...]
    reason: str | None = None  # why it stopped or was refused

    def replica(self, host: str) -> ReplicaView:
        return next(r for r in self.replicas if r.host == host)

    def with_replica(self, host: str, **changes: object) -> RolloutView:
        replicas = tuple(
            replace(r, **changes) if r.host == host else r  # type: ignore[arg-type]
            for r in self.replicas
        )
        return replace(self, replicas=replicas)

    @property
    def changed(self) -> tuple[str, ...]:
        return tuple(r.host for r in self.replicas if r.phase in CHANGED_PHASES)

    @property
    def unchanged(self) -> tuple[str, ...]:
        return tuple(r.host for r in self.replicas if r.phase not in CHANGED_PHASES)

    @property
    def finished(self) -> bool:
        return self.state in FINAL_ROLLOUT_STATES

    @property
    def undoable(self) -> bool:
        """Whether ``rollback fleet`` would undo something of this rollout: only a resize
        changes configs, and only its replicas that changed."""
        changes_config = self.change not in (OperationKind.RESTART, OperationKind.ROLLBACK)
        return changes_config and bool(self.changed)


#: What a replica whose agent runs the rollout's operation is doing, by the rollout's change.
_RUNNING_AS = {
    OperationKind.RESTART.value: "restarting",
    OperationKind.ROLLBACK.value: "rolling back",
}


def phase_label(view: RolloutView, line: ReplicaView) -> str:
    """``line``'s phase as people read it: the agent's operation is a restart or a rollback in
    those rollouts, a resize only in a resize."""
    if line.phase is ReplicaPhase.RESIZING:
        return _RUNNING_AS.get(view.change, line.phase.value)
    return line.phase.value


@dataclass(frozen=True)
class ReplicaFacts:
    """What a front end shows after a replica's phase, each part None when there is nothing to
    say: ``change`` ("size 20 GB/rank -> ratio 4"), the running agent operation, the seconds it
    was out of the router, the detail (a drain timeout, a failure)."""

    change: str | None
    operation: str | None
    out: str | None
    detail: str | None


def replica_facts(line: ReplicaView) -> ReplicaFacts:
    """The same facts for every surface; each lays them out in its own wording module."""
    change = None
    if line.old_config and line.new_config and line.old_config != line.new_config:
        change = f"{line.old_config} -> {line.new_config}"
    running = line.operation_id is not None and line.seconds is None
    return ReplicaFacts(
        change=change,
        operation=f"agent operation {line.operation_id}" if running else None,
        out=None if line.seconds is None else f"out of the router {line.seconds:.1f} s",
        detail=line.detail or None,
    )
