"""Fleets: SGLang replicas behind SGLang's router, resized one by one with no dropped request.

:func:`load_fleets` reads ``[fleets.NAME]``; :class:`RouterClient` drives the router whichever
worker API it speaks and reads its circuit breakers (:class:`Breaker`); :func:`plan_fleet` plans
every replica before any is touched; :class:`RolloutRunner` waits until the other replicas can
take a replica's traffic, takes it out, drains it, resizes it through its agent and puts it back;
:class:`FleetDesk` records rollouts in the store, runs them and resumes them after a bot restart,
and puts back a replica that serves but is out of the router (:func:`rejoin`);
:class:`RolloutView` is what a front end shows.
"""

from __future__ import annotations

from bot.errors import FleetBusy, FleetError, RouterError, RouterUnsupported
from bot.fleet.breakers import Breaker, breaker_states
from bot.fleet.config import FleetSettings, load_fleets
from bot.fleet.desk import (
    FleetDesk,
    RolloutSink,
    RolloutStore,
    RouterListing,
    StoreRolloutLog,
    view_of,
)
from bot.fleet.drain import DrainResult, LoadProbe, ReplicaLoad, wait_idle
from bot.fleet.plan import FleetChange, FleetPlan, FleetRefusal, ReplicaAgent, plan_fleet
from bot.fleet.rejoin import Rejoined, rejoin, serving_out
from bot.fleet.rollout import RolloutLog, RolloutRunner, RouterSeam
from bot.fleet.router import RouterApi, RouterClient, RouterWorker
from bot.fleet.view import ReplicaView, RolloutView, phase_label

__all__ = [
    "Breaker",
    "DrainResult",
    "FleetBusy",
    "FleetChange",
    "FleetDesk",
    "FleetError",
    "FleetPlan",
    "FleetRefusal",
    "FleetSettings",
    "LoadProbe",
    "Rejoined",
    "ReplicaAgent",
    "ReplicaLoad",
    "ReplicaView",
    "RolloutLog",
    "RolloutRunner",
    "RolloutSink",
    "RolloutStore",
    "RolloutView",
    "RouterApi",
    "RouterClient",
    "RouterError",
    "RouterListing",
    "RouterSeam",
    "RouterUnsupported",
    "RouterWorker",
    "StoreRolloutLog",
    "breaker_states",
    "load_fleets",
    "phase_label",
    "plan_fleet",
    "rejoin",
    "serving_out",
    "view_of",
    "wait_idle",
]
