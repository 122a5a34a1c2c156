"""The fleet desk: where the bot core plans, records, runs and resumes rollouts.

::

    desk = FleetDesk(fleets, store, agents, sink, clock)
    desk.resume()                    # carry on what a stopped bot left running
    rollout = desk.begin("prod", FleetChange(OperationKind.RESTART), replicas, "U1", "C1")
    desk.wait(rollout.id, timeout_s=600)
    desk.close()                     # halts the runners; the store keeps them running

Each rollout runs on its own thread; every phase change is saved in the store before the
front end hears of it (:class:`StoreRolloutLog`), so a bot stopped mid-rollout leaves each
replica's phase and agent operation on record, and the next bot's :meth:`FleetDesk.resume`
follows a running agent operation instead of starting it again and puts a replica it finds out
of the router back. A fleet runs one rollout at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from bot.clock import Clock
from bot.errors import AgentError, FleetBusy, NotFound, RouterError
from bot.fleet.config import FleetSettings
from bot.fleet.drain import LoadProbe, ReplicaLoad
from bot.fleet.plan import FleetChange, FleetPlan, FleetRefusal, ReplicaAgent, plan_fleet
from bot.fleet.rejoin import Rejoined, rejoin
from bot.fleet.rollout import EVENT_WAIT_S, RolloutRunner, RouterSeam
from bot.fleet.router import RouterClient, RouterWorker
from bot.fleet.view import ReplicaView, RolloutView
from bot.store.records import RolloutRecord, RolloutReplicaRecord
from bot.vocab import (
    OperationKind,
    ReplicaPhase,
    RolloutState,
)

__all__ = [
    "FleetDesk",
    "RolloutSink",
    "RolloutStore",
    "RouterListing",
    "StoreRolloutLog",
    "view_of",
]

#: A replica's line has ended once it reaches one of these.
ENDED_PHASES = frozenset({ReplicaPhase.DONE, ReplicaPhase.ROLLED_BACK, ReplicaPhase.FAILED})


class RolloutStore(Protocol):
    """The store's rollout methods (:class:`bot.store.Store`)."""

    def record_rollout(
        self,
        fleet: str,
        kind: OperationKind,
        change: str,
        replicas: Sequence[RolloutReplicaRecord],
        *,
        proposed_by: str,
        state: RolloutState,
        ratio: float | None = None,
        size_gb: int | None = None,
        reason: str | None = None,
        channel: str | None = None,
        expires_at: datetime | None = None,
        at: datetime | None = None,
    ) -> RolloutRecord: ...

    def rollout(self, rollout_id: int) -> RolloutRecord: ...

    def save_rollout(
        self,
        rollout_id: int,
        state: RolloutState,
        replicas: Sequence[RolloutReplicaRecord],
        reason: str | None = None,
        at: datetime | None = None,
    ) -> RolloutRecord: ...

    def start_rollout(self, rollout_id: int, applied_by: str, at: datetime) -> RolloutRecord: ...

    def unfinished_rollouts(self) -> list[RolloutRecord]: ...

    def expire_rollouts(self, now: datetime) -> list[RolloutRecord]: ...

    def cancel_rollout(self, rollout_id: int, reason: str, at: datetime) -> RolloutRecord: ...

    def last_rollout(self, fleet: str) -> RolloutRecord | None: ...

    def rollout_by_proposal(self, proposal_id: int) -> RolloutRecord | None: ...


class RolloutSink(Protocol):
    """Where a front end hears of rollouts (the Slack app, the terminal, a test's recorder)."""

    def rollout(self, view: RolloutView) -> None:
        """A new view of a running rollout (already saved)."""
        ...

    def replica_ended(self, view: RolloutView, host: str) -> None:
        """``host``'s line reached done, rolled back or failed."""
        ...


class ClosingRouter(RouterSeam, Protocol):
    """The router client a runner uses, closed when its rollout ends."""

    def close(self) -> None: ...


def router_of(fleet: FleetSettings) -> RouterClient:
    """The client of ``fleet``'s router, its Prometheus export included."""
    return RouterClient(fleet.router, metrics_url=fleet.router_metrics)


def view_of(record: RolloutRecord) -> RolloutView:
    """The view of a stored rollout (the applier, once there is one, is its actor)."""
    return RolloutView(
        id=record.id,
        fleet=record.fleet,
        change=record.change,
        actor=record.applied_by or record.proposed_by,
        state=record.state,
        replicas=record.replicas,
        reason=record.reason,
    )


def change_of(record: RolloutRecord) -> FleetChange:
    return FleetChange(record.kind, ratio=record.ratio, size_gb=record.size_gb)


class StoreRolloutLog:
    """:class:`bot.fleet.rollout.RolloutLog` over the store: each view saved whole."""

    def __init__(self, store: RolloutStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def save_rollout(self, view: RolloutView) -> None:
        self.store.save_rollout(
            view.id, view.state, view.replicas, view.reason, at=self.clock.now()
        )


@dataclass(frozen=True)
class RouterListing:
    """What a fleet's router holds, as ``fleets`` shows it: ``workers`` by URL, or None with the
    ``problem`` when the router cannot be read."""

    workers: tuple[RouterWorker, ...] | None
    problem: str | None = None

    def holds(self, url: str) -> bool:
        return self.workers is not None and any(
            w.url.rstrip("/") == url.rstrip("/") for w in self.workers
        )


@dataclass
class _Running:
    runner: RolloutRunner
    thread: threading.Thread
    done: threading.Event = field(default_factory=threading.Event)
    final: RolloutView | None = None


class FleetDesk:
    """Plans, records, runs and resumes the rollouts of ``fleets``; thread-safe."""

    def __init__(
        self,
        fleets: Mapping[str, FleetSettings],
        store: RolloutStore,
        agents: Mapping[str, ReplicaAgent],
        sink: RolloutSink,
        clock: Clock,
        router: Callable[[FleetSettings], ClosingRouter] = router_of,
        probe: LoadProbe | None = None,
        event_wait_s: float = EVENT_WAIT_S,
    ) -> None:
        self.fleets = fleets
        self.store = store
        self.agents = agents
        self.sink = sink
        self.clock = clock
        self._router = router
        self._probe = probe or ReplicaLoad()
        self._event_wait_s = event_wait_s
        self._lock = threading.Lock()
        self._running: dict[int, _Running] = {}

    # -- planning and recording -------------------------------------------------------------

    def fleet(self, name: str) -> FleetSettings:
        try:
            return self.fleets[name]
        except KeyError:
            known = ", ".join(sorted(self.fleets)) or "none configured"
            raise NotFound(f"there is no fleet {name!r} (fleets: {known})") from None

    def plan(self, name: str, change: FleetChange) -> FleetPlan | FleetRefusal:
        fleet = self.fleet(name)
        return plan_fleet(fleet, {h: self.agents[h] for h in fleet.hosts}, change)

    def propose(
        self,
        name: str,
        change: FleetChange,
        replicas: Sequence[ReplicaView],
        proposed_by: str,
        channel: str,
        expires_at: datetime,
    ) -> RolloutRecord:
        """Record a planned rollout that waits for an Apply (and end, as expired, those whose
        Apply window closed meanwhile)."""
        self.store.expire_rollouts(self.clock.now())
        return self._record(name, change, replicas, proposed_by, channel, RolloutState.PROPOSED,
                            expires_at=expires_at)  # fmt: skip

    def refuse(
        self, refusal: FleetRefusal, change: FleetChange, proposed_by: str, channel: str
    ) -> RolloutRecord:
        """Record a rollout refused at planning: nothing was touched."""
        reason = "; ".join(f"{host}: {why}" for host, why in refusal.reasons)
        return self._record(refusal.fleet, change, refusal.replicas, proposed_by, channel,
                            RolloutState.REFUSED, reason=reason)  # fmt: skip

    def _record(
        self,
        name: str,
        change: FleetChange,
        replicas: Sequence[ReplicaView],
        actor: str,
        channel: str,
        state: RolloutState,
        expires_at: datetime | None = None,
        reason: str | None = None,
    ) -> RolloutRecord:
        return self.store.record_rollout(
            name,
            change.kind,
            change.label,
            replicas,
            proposed_by=actor,
            state=state,
            ratio=change.ratio,
            size_gb=change.size_gb,
            reason=reason,
            channel=channel,
            expires_at=expires_at,
            at=self.clock.now(),
        )

    def running_in(self, name: str) -> RolloutRecord | None:
        """The rollout of fleet ``name`` running now, if any (in the store: any bot's)."""
        return next((r for r in self.store.unfinished_rollouts() if r.fleet == name), None)

    def refuse_busy(self, name: str) -> None:
        """Raise :class:`FleetBusy` when fleet ``name`` is in a rollout."""
        busy = self.running_in(name)
        if busy is not None:
            since = busy.started_at or busy.created_at
            raise FleetBusy(
                f"fleet {name} is in rollout #{busy.id} ({busy.change}, applied by "
                f"{busy.applied_by or busy.proposed_by} at {since:%H:%M} UTC); "
                f"wait for it, or 'resume fleet {name}' if no bot carries it on",
                busy.id,
            )

    # -- running ----------------------------------------------------------------------------

    def begin(
        self,
        name: str,
        change: FleetChange,
        replicas: Sequence[ReplicaView],
        actor: str,
        channel: str,
    ) -> RolloutRecord:
        """Record a rollout that needs no proposal (restart, rollback) and run it."""
        self.refuse_busy(name)
        record = self._record(name, change, replicas, actor, channel, RolloutState.RUNNING)
        self._launch(record)
        return record

    def start(self, rollout_id: int, actor: str) -> RolloutRecord:
        """Start a proposed rollout for ``actor``; the record as it stands (another applier's
        when they were first: the caller compares ``applied_by``)."""
        self.refuse_busy(self.store.rollout(rollout_id).fleet)
        record = self.store.start_rollout(rollout_id, actor, self.clock.now())
        if record.applied_by == actor and record.state is RolloutState.RUNNING:
            self._launch(record)
        return record

    def resume(self, name: str | None = None) -> list[RolloutRecord]:
        """Carry on every rollout the store holds as running (of fleet ``name`` only, when
        given) that no runner of this desk carries already; proposals whose Apply window closed
        while no bot ran end expired."""
        self.store.expire_rollouts(self.clock.now())
        found = []
        for record in self.store.unfinished_rollouts():
            if (name is None or record.fleet == name) and record.fleet in self.fleets:
                with self._lock:
                    if record.id in self._running and not self._running[record.id].done.is_set():
                        continue
                self._launch(record)
                found.append(record)
        return found

    def _launch(self, record: RolloutRecord) -> None:
        fleet = self.fleet(record.fleet)
        view = view_of(record)
        if view.state is not RolloutState.RUNNING:
            view = RolloutView(view.id, view.fleet, view.change, view.actor,
                               RolloutState.RUNNING, view.replicas)  # fmt: skip
        seen = {line.host: line.phase for line in view.replicas}

        def on_view(new: RolloutView) -> None:
            self.sink.rollout(new)
            for line in new.replicas:
                if line.phase in ENDED_PHASES and seen.get(line.host) is not line.phase:
                    self.sink.replica_ended(new, line.host)
                seen[line.host] = line.phase

        router = self._router(fleet)
        members = self._members(fleet, view)
        runner = RolloutRunner(
            fleet,
            change_of(record),
            router,
            {h: self.agents[h] for h in fleet.hosts},
            self._probe,
            self.clock,
            StoreRolloutLog(self.store, self.clock),
            on_view,
            event_wait_s=self._event_wait_s,
            since=record.started_at or record.created_at,
            members=members,
        )

        def run() -> None:
            try:
                running.final = runner.run(view)
            finally:
                router.close()
                running.done.set()

        thread = threading.Thread(target=run, name=f"rollout-{record.id}", daemon=True)
        running = _Running(runner, thread)
        with self._lock:
            self._running[record.id] = running
        self.sink.rollout(view)
        thread.start()

    def _members(self, fleet: FleetSettings, view: RolloutView) -> dict[str, str]:
        """Every replica of ``fleet`` by host as the router reaches it: the rollout's own lines,
        and the others' from the settings or their agents (one whose agent is silent and that
        the settings do not name cannot be counted)."""
        members = {line.host: line.url for line in view.replicas}
        for host in fleet.hosts:
            if host in members:
                continue
            try:
                url = fleet.url(host, self.agents[host].status().router_url)
            except AgentError:
                url = fleet.url(host)
            if url is not None:
                members[host] = url
        return members

    # -- the router -------------------------------------------------------------------------

    def listing(self, name: str) -> RouterListing:
        """What fleet ``name``'s router holds now, or why it cannot be read."""
        router = self._router(self.fleet(name))
        try:
            return RouterListing(router.workers())
        except RouterError as exc:
            return RouterListing(None, str(exc))
        finally:
            router.close()

    def rejoin(self, name: str, host: str) -> Rejoined:
        """Put ``host`` back in fleet ``name``'s router once its health is checked (refused
        while a rollout of the fleet runs: the rollout puts its replicas back itself)."""
        fleet = self.fleet(name)
        if host not in fleet.hosts:
            raise NotFound(
                f"{host} is no replica of fleet {name} (its hosts: {', '.join(fleet.hosts)})"
            )
        self.refuse_busy(name)
        router = self._router(fleet)
        try:
            return rejoin(fleet, router, self.agents[host], host, self.clock)
        finally:
            router.close()

    def wait(self, rollout_id: int, timeout_s: float | None = None) -> RolloutView | None:
        """Block until this desk's runner of ``rollout_id`` ends; its last view (None while it
        still runs at the timeout, or when this desk does not run it)."""
        with self._lock:
            running = self._running.get(rollout_id)
        if running is None:
            return None
        running.done.wait(timeout_s)
        return running.final

    def close(self, timeout_s: float = 60.0) -> None:
        """Halt every runner at its next wait and join it; the store keeps them running."""
        with self._lock:
            runners = list(self._running.values())
        for running in runners:
            running.runner.halt()
        for running in runners:
            running.thread.join(timeout_s)
        if isinstance(self._probe, ReplicaLoad):
            self._probe.close()
