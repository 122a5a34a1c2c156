"""Plan every replica of a fleet before touching any: one refusal refuses the rollout.

Hosts may differ in RAM, so each host's agent plans the change on its own live facts; the
refusal names the host and carries the planner's arithmetic (``plan.reason``), e.g.
"kimi-02: REFUSED: ratio 4 needs 8 ranks x 44.77 GB = 358.2 GB; ... leaves 301.0 GB".
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from bot.agent_json import AgentOperation, AgentStatus, OperationPage, PlannedChange
from bot.errors import AgentError
from bot.fleet.config import FleetSettings
from bot.fleet.view import ReplicaView
from bot.vocab import OperationKind

__all__ = ["NO_URL", "FleetChange", "FleetPlan", "FleetRefusal", "ReplicaAgent", "plan_fleet"]


class ReplicaAgent(Protocol):
    """What a rollout asks of a host's agent (:class:`bot.chat.agent_client.AgentClient`)."""

    def status(self) -> AgentStatus: ...

    def plan(self, ratio: float | None = None, size_gb: int | None = None) -> PlannedChange: ...

    def submit(
        self,
        kind: OperationKind,
        actor: str,
        ratio: float | None = None,
        size_gb: int | None = None,
        revision: int | None = None,
        fingerprint: str | None = None,
    ) -> AgentOperation: ...

    def events(self, operation_id: int, after: int = 0, wait_s: float = 0.0) -> OperationPage: ...

    def operations(self, limit: int = 20) -> tuple[AgentOperation, ...]: ...


@dataclass(frozen=True)
class FleetChange:
    """What the rollout does to each replica: a resize, a restart or a rollback."""

    kind: OperationKind
    ratio: float | None = None
    size_gb: int | None = None

    @property
    def label(self) -> str:
        if self.kind is not OperationKind.RESIZE:
            return self.kind.value
        if self.size_gb is not None:
            return f"hicache size {self.size_gb}"
        return f"hicache ratio {self.ratio:g}"


@dataclass(frozen=True)
class FleetRefusal:
    """The rollout was refused before anything changed: each refused host and why."""

    fleet: str
    change: str
    reasons: tuple[tuple[str, str], ...]  # (host, the planner's arithmetic or the agent's error)
    replicas: tuple[ReplicaView, ...]  # every host's plan, the fitting ones too


@dataclass(frozen=True)
class FleetPlan:
    """Every replica's line, and for a resize each host's plan as its agent answered it (what a
    proposal records, fingerprint included)."""

    replicas: tuple[ReplicaView, ...]
    changes: Mapping[str, PlannedChange]


#: The URL a refused line records for a host whose URL nobody could tell (the store keeps a
#: line's URL non-empty; a refused rollout never reaches the router).
NO_URL = "(unknown)"


def plan_fleet(
    fleet: FleetSettings, agents: Mapping[str, ReplicaAgent], change: FleetChange
) -> FleetPlan | FleetRefusal:
    """Each replica's line (its plan for a resize, its config now), or the refusal of the whole
    rollout: every agent is asked, and one that does not answer refuses it for any change (a
    restart or rollback too), before anything is touched."""

    changes: dict[str, PlannedChange] = {}

    def one(host: str) -> tuple[ReplicaView, str | None]:
        try:
            status = agents[host].status()
        except AgentError as exc:
            url = fleet.url(host) or NO_URL
            line = ReplicaView(host, url, planned="agent unreachable")
            return line, f"its agent does not answer ({exc}); nothing was touched"
        old = status.effective
        found = fleet.url(host, status.router_url)
        if found is None:
            why = (
                f"no URL for {host} in the router: its agent does not report router_url and "
                f"[fleets.{fleet.name}] replica_urls names none (set [agent] router_url)"
            )
            return ReplicaView(host, NO_URL, planned="no URL", old_config=old), why
        url = found
        if change.kind is not OperationKind.RESIZE:
            new = old if change.kind is OperationKind.RESTART else None
            return ReplicaView(host, url, old_config=old, new_config=new), None
        try:
            planned = agents[host].plan(ratio=change.ratio, size_gb=change.size_gb)
        except AgentError as exc:
            return ReplicaView(host, url, planned="no plan", old_config=old), str(exc)
        changes[host] = planned
        plan = planned.plan
        if plan.per_rank_gb is None:
            figure = plan.setting
        else:
            figure = f"{plan.setting}: {plan.ranks} x {plan.per_rank_gb:.2f} GB/rank"
            if plan.total_gb is not None:
                figure += f" = {plan.total_gb:.1f} GB"
            if plan.budget_gb is not None:
                figure += f" of {plan.budget_gb:.1f} GB budget"
        line = ReplicaView(host, url, planned=figure, old_config=old, new_config=plan.setting)
        return line, None if plan.fits else plan.reason

    with ThreadPoolExecutor(max_workers=len(fleet.hosts)) as pool:
        answers = list(pool.map(one, fleet.hosts))
    replicas = tuple(line for line, _ in answers)
    reasons = tuple((line.host, why) for line, why in answers if why is not None)
    if reasons:
        return FleetRefusal(fleet.name, change.label, reasons, replicas)
    return FleetPlan(replicas, {host: changes[host] for host in fleet.hosts if host in changes})
