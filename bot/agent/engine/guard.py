"""The startup guard: stop a start the moment SGLang's host pools would exhaust the host's RAM.

SGLang <= 0.5.18 checks each rank's host pool alone, so eight ranks pin their pools together for
a minute or more until the kernel kills the tree (or, on a shared host, something else). The
plan checked the change against a budget first; the guard checks the start against it as it
happens, two ways:

- **Host pools over budget.** SGLang logs each pool's size just before it pins it::

      "[2026-02-24 11:20:09 TP0] Allocating 44.77 GB host memory for hierarchical KV cache."

  On the first such line of each pool kind the guard adds up ``ranks x (every host pool logged
  so far + the plan's figure for those not logged yet)`` and compares it with the plan's budget
  (available + held by the old server - SGLang's reserve - headroom, cgroup cap). Over it, the
  start trips with ``host_pool_over_budget`` before the pin has got far.
- **A RAM floor.** Every ``[agent] guard_interval_s`` the watchdog reads available RAM (and the
  cgroup's room, when there is a limit); below ``[agent] guard_floor_gb`` (SGLang's 10 GiB
  reserve by default) the start trips with ``host_ram_floor``, whoever ate the RAM.

Pure apart from the probe it is given: the caller passes the start's figures and the monotonic
time in, and kills the server when a :class:`GuardTrip` comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.agent.config import GuardSettings
from bot.agent.engine.watcher import StartFigures
from bot.agent.host.probe import HostProbe, RamFacts
from bot.errors import ProbeError
from bot.planner import GB
from bot.startup import KV_HOST_POOL
from bot.vocab import FailureKind

__all__ = ["GuardTrip", "PoolBudget", "StartGuard", "guard_note", "room_left"]

log = logging.getLogger(__name__)

# The log gives GB with two decimals: a pool the plan put exactly at the budget may read up to
# half a hundredth of a GB more per rank without being over it.
_LOGGED_ROUNDING_BYTES = 0.005 * GB


@dataclass(frozen=True)
class PoolBudget:
    """What the plan allowed a start: ``budget_bytes`` for all ranks' host pools, and the
    planned bytes per rank of each host pool (``"kv"`` and extras such as ``"DSA indexer"``)."""

    budget_bytes: float
    planned_per_rank: Mapping[str, int]

    @classmethod
    def from_plan(
        cls, plan: Mapping[str, Any] | None, with_pools: bool = True
    ) -> PoolBudget | None:
        """The budget of a stored plan (``Plan.to_dict()``); None when there is no plan.

        ``with_pools=False`` keeps the budget but not the planned pools: a rollback starts
        another config than the one planned, so only its logged pools count."""
        if plan is None or plan.get("budget_bytes") is None:
            return None
        planned: dict[str, int] = {}
        if with_pools:
            if plan.get("per_rank_bytes") is not None:
                planned[KV_HOST_POOL] = int(plan["per_rank_bytes"])
            for name, value in dict(plan.get("host_extra_bytes_per_rank") or {}).items():
                planned[str(name)] = int(value)
        return cls(float(plan["budget_bytes"]), planned)


@dataclass(frozen=True)
class GuardTrip:
    """Why the guard stops a start: its failure kind, the sentence, the figures and the lines."""

    kind: FailureKind
    message: str
    data: dict[str, Any]
    lines: tuple[str, ...] = ()


def guard_note(settings: GuardSettings, budget_bytes: float) -> str:
    """The plan's note on whether, and how, the start it leads to is guarded."""
    if not settings.enabled:
        return (
            "startup guard off ([agent] guard = false): a start whose host pools exceed the "
            "budget pins until the kernel kills it"
        )
    return (
        f"startup guard on: the start is killed if its logged host pools exceed the budget of "
        f"{budget_bytes / GB:.1f} GB or host RAM falls below {settings.floor_gb:.1f} GB "
        f"(sampled every {settings.interval_s:g} s)"
    )


def room_left(ram: RamFacts) -> int:
    """RAM a start can still take: the memory domain's headroom (host MemAvailable, or the
    cgroup's room under its limit if less), the figure the planner and the watch read too."""
    return ram.headroom_bytes


class StartGuard:
    """Guards one start: ``check`` it with the start's figures at every turn of the follower."""

    def __init__(
        self,
        settings: GuardSettings,
        probe: HostProbe,
        budget: PoolBudget | None,
        ranks: int,
    ) -> None:
        self.settings = settings
        self.probe = probe
        self.budget = budget
        self.ranks = max(1, ranks)
        self._pools_seen: tuple[str, ...] = ()
        self._next_sample: float | None = None
        self.lowest_room_bytes: int | None = None

    def check(self, figures: StartFigures, now: float) -> GuardTrip | None:
        """A trip if the logged host pools are over budget or RAM is below the floor, else None
        (``now`` is monotonic seconds; RAM is sampled at most once per interval)."""
        return self._pools(figures) or self._ram(now)

    def _pools(self, figures: StartFigures) -> GuardTrip | None:
        logged = _logged_per_rank(figures)
        if self.budget is None or tuple(logged) == self._pools_seen:
            return None  # no budget, or no new pool logged since the last check
        self._pools_seen = tuple(logged)
        per_rank = dict(self.budget.planned_per_rank)
        per_rank.update(logged)
        total = self.ranks * sum(per_rank.values())
        allowed = self.budget.budget_bytes + self.ranks * _LOGGED_ROUNDING_BYTES * len(logged)
        if total <= allowed:
            return None
        planned_total = self.ranks * sum(self.budget.planned_per_rank.values())
        planned_text = (
            f"the plan's {planned_total / GB:.1f} GB"
            if self.budget.planned_per_rank
            else "no planned figure for this config"
        )
        pools = " + ".join(f"{name} {value / GB:.2f}" for name, value in per_rank.items())
        return GuardTrip(
            FailureKind.HOST_POOL_OVER_BUDGET,
            f"stopped the start: SGLang sizes its host pools at {pools} GB per rank x "
            f"{self.ranks} ranks = {total / GB:.1f} GB, over the budget of "
            f"{self.budget.budget_bytes / GB:.1f} GB ({planned_text})",
            {
                "logged_gb_per_rank": {name: round(v / GB, 2) for name, v in logged.items()},
                "planned_gb_per_rank": {
                    name: round(v / GB, 2) for name, v in self.budget.planned_per_rank.items()
                },
                "logged_total_gb": round(total / GB, 2),
                "planned_total_gb": round(planned_total / GB, 2),
                "budget_gb": round(self.budget.budget_bytes / GB, 2),
                "ranks": self.ranks,
            },
            tuple(figures.host_pool_lines),
        )

    def _ram(self, now: float) -> GuardTrip | None:
        if self._next_sample is not None and now < self._next_sample:
            return None
        self._next_sample = now + self.settings.interval_s
        try:
            ram = self.probe.ram()
        except ProbeError as exc:  # a probe hiccup is no reason to kill a start
            log.warning("the startup guard could not read host RAM: %s", exc)
            return None
        room = room_left(ram)
        if self.lowest_room_bytes is None or room < self.lowest_room_bytes:
            self.lowest_room_bytes = room
        if room >= self.settings.floor_bytes:
            return None
        where = "in the cgroup" if room < ram.available_bytes else "available"
        return GuardTrip(
            FailureKind.HOST_RAM_FLOOR,
            f"stopped the start: host RAM {where} fell to {room / GB:.1f} GB, below the "
            f"guard's floor of {self.settings.floor_gb:.1f} GB",
            {
                "room_gb": round(room / GB, 2),
                "available_gb": round(ram.available_bytes / GB, 2),
                "cgroup_limit_gb": None
                if ram.cgroup_limit_bytes is None
                else round(ram.cgroup_limit_bytes / GB, 2),
                "floor_gb": round(self.settings.floor_gb, 2),
            },
        )


def _logged_per_rank(figures: StartFigures) -> dict[str, int]:
    """Bytes per rank of every host pool the log has shown so far, by pool kind."""
    logged: dict[str, int] = {}
    if figures.host_gb_per_rank is not None:
        logged[KV_HOST_POOL] = round(figures.host_gb_per_rank * GB)
    for name, gb in figures.host_extra_gb.items():
        logged[name] = round(gb * GB)
    return logged
