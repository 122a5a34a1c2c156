"""What a rollout looks like to a front end: one view, a line per replica with its phase.

The core hands a :class:`RolloutView` to the front end on every phase change (as it hands an
operation's ``ProgressView``); the terminal lays it out in one block, Slack in one message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

__all__ = ["ReplicaPhase", "ReplicaView", "RolloutState", "RolloutView"]


class ReplicaPhase(StrEnum):
    """Where one replica of a rollout stands."""

    WAITING = "waiting"  # not touched yet
    REMOVING = "removing"  # being taken out of the router
    DRAINING = "draining"  # out of the router, finishing the requests it runs
    RESIZING = "resizing"  # its agent restarts it on the new config
    ADDING = "adding"  # back in the router, waiting to be reported healthy
    DONE = "done"  # changed, back in the router and healthy
    ROLLED_BACK = "rolled_back"  # the new config failed; back on its old one
    FAILED = "failed"  # it did not come back at all
    UNCHANGED = "unchanged"  # the rollout stopped before it


class RolloutState(StrEnum):
    RUNNING = "running"
    DONE = "done"  # every replica changed
    STOPPED = "stopped"  # a replica failed: the rest were left as they were
    REFUSED = "refused"  # a plan did not fit: nothing was touched


FINAL_ROLLOUT_STATES = frozenset({RolloutState.DONE, RolloutState.STOPPED, RolloutState.REFUSED})
CHANGED_PHASES = frozenset({ReplicaPhase.DONE})


@dataclass(frozen=True)
class ReplicaView:
    host: str
    url: str
    phase: ReplicaPhase = ReplicaPhase.WAITING
    planned: str | None = None  # "44.77 GB/rank" or the refusal's arithmetic
    operation_id: int | None = None
    revision: int | None = None  # the agent's revision this replica ran at the end
    detail: str | None = None  # a drain timeout reached, a failure's reason, ...
    seconds: float | None = None  # how long the replica was out of the router


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
