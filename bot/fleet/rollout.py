"""The rollout: replica by replica (at most ``max_unavailable`` out of the router at once)::

    remove from the router -> drain (the replica's own /get_load) -> resize through its agent
    -> add back -> wait until the router reports it healthy -> next

The router does not drain: removing a worker only stops new requests, those running finish on
it, so the rollout waits until the replica itself says it is idle, up to the drain timeout (then
SGLang's own SIGTERM drain is the backstop, and the view says the timeout was reached). A
replica whose new config fails comes back on its old one (the agent rolls it back), is added back
to the router, and the rollout stops there: the view says which replicas changed and which did
not. Every phase change is saved through :class:`RolloutLog` first, so a bot restarted mid-way
resumes from the store (:meth:`RolloutRunner.run` on the saved view).

Every replica's agent is asked before any replica leaves the router, and each again right before
its own goes: a replica whose agent does not answer is never drained for nothing. Replicas out of
the router count against ``max_unavailable`` whatever took them out; one that nothing will put
back (its agent silent, its last operation failed, or serving but left out) stops the rollout at
once, naming it, instead of waiting out ``breaker_timeout_s``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Protocol

from bot.agent_json import AgentOperation, AgentStatus
from bot.clock import Clock
from bot.errors import AgentError, RouterError
from bot.fleet._ready import not_ready
from bot.fleet._resume import started_operation
from bot.fleet.breakers import Breaker
from bot.fleet.config import FleetSettings
from bot.fleet.drain import LoadProbe, wait_idle
from bot.fleet.plan import FleetChange, ReplicaAgent
from bot.fleet.router import RouterApi, RouterWorker
from bot.fleet.view import RolloutView
from bot.vocab import (
    OperationState,
    ReplicaPhase,
    RolloutState,
    ServerState,
)

__all__ = ["RolloutLog", "RolloutRunner", "RouterSeam"]

#: A long-poll on the agent's operation returns on each event, or after this many seconds.
EVENT_WAIT_S = 20.0
#: How long 0.2.x/0.3.x may take to carry out a queued removal before it shows.
REMOVAL_TIMEOUT_S = 60.0


#: The phases of a replica this rollout has out of the router (or is taking out).
_OUT = frozenset(
    {ReplicaPhase.REMOVING, ReplicaPhase.DRAINING, ReplicaPhase.RESIZING, ReplicaPhase.ADDING}
)
#: The phases of a replica no runner has touched yet (or whose line ended): asked first.
_UNTOUCHED = frozenset(
    {
        ReplicaPhase.WAITING,
        ReplicaPhase.UNCHANGED,
        ReplicaPhase.ROLLED_BACK,
        ReplicaPhase.FAILED,
    }
)


class RouterSeam(Protocol):
    """What the rollout asks of the router (:class:`bot.fleet.router.RouterClient`)."""

    def api(self) -> RouterApi: ...

    def workers(self) -> tuple[RouterWorker, ...]: ...

    def worker(self, url: str) -> RouterWorker | None: ...

    def breakers(self) -> Mapping[str, Breaker] | None: ...

    def add(self, url: str) -> None: ...

    def remove(self, url: str) -> None: ...


class RolloutLog(Protocol):
    """Where each phase change is saved before the rollout moves on (the store)."""

    def save_rollout(self, view: RolloutView) -> None: ...


class _Stop(Exception):
    """A replica ended the rollout (its line already says why)."""


class _Halt(Exception):
    """The bot is stopping: leave the rollout where it stands, saved, for the next bot."""


class RolloutRunner:
    """Carries one rollout to its end; ``on_view`` gets every new view (already saved)."""

    def __init__(
        self,
        fleet: FleetSettings,
        change: FleetChange,
        router: RouterSeam,
        agents: Mapping[str, ReplicaAgent],
        probe: LoadProbe,
        clock: Clock,
        log: RolloutLog,
        on_view: Callable[[RolloutView], None] = lambda view: None,
        event_wait_s: float = EVENT_WAIT_S,
        since: datetime | None = None,
        members: Mapping[str, str] | None = None,
    ) -> None:
        self.fleet = fleet
        self.change = change
        self.router = router
        self.agents = agents
        self.probe = probe
        self.clock = clock
        self.log = log
        self.on_view = on_view
        self.event_wait_s = event_wait_s
        #: When the rollout started: a replica's operation is no older (less the clock skew).
        self.since = since
        #: Every replica of the fleet by host, as the router reaches it: those this rollout
        #: does not change count against max_unavailable too (the view's own are added).
        self.members = dict(members or {})
        self._halted = threading.Event()
        self._lock = threading.Lock()
        #: Held from the check that a replica may go out until its line says it is going, so
        #: two replicas of one batch never both count the same free place.
        self._out_lock = threading.Lock()
        self._view: RolloutView | None = None

    # -- the view ---------------------------------------------------------------------------

    def _publish(self, view: RolloutView) -> None:
        self._view = view
        self.log.save_rollout(view)
        self.on_view(view)

    def _set(self, host: str, **changes: object) -> None:
        with self._lock:
            assert self._view is not None
            self._publish(self._view.with_replica(host, **changes))

    def _phase(self, host: str) -> ReplicaPhase:
        assert self._view is not None
        return self._view.replica(host).phase

    def halt(self) -> None:
        """Stop at the next wait without ending the rollout: the store keeps it running, with
        each replica's phase and agent operation, for the next bot to resume (the agents carry
        on with the operations they run)."""
        self._halted.set()

    def _check_halt(self) -> None:
        if self._halted.is_set():
            raise _Halt

    # -- the run ----------------------------------------------------------------------------

    def run(self, view: RolloutView) -> RolloutView:
        """Carry ``view`` (new, or saved by a bot that stopped mid-way) to its end; after
        :meth:`halt`, the view as it stood, still running."""
        self._view = view
        for line in view.replicas:
            self.members.setdefault(line.host, line.url)
        todo = [r.host for r in view.replicas if r.phase is not ReplicaPhase.DONE]
        step = self.fleet.max_unavailable
        silent = self._silent_agents([h for h in todo if view.replica(h).phase in _UNTOUCHED])
        if silent:
            for host, why in silent:
                self._set(host, detail=f"not taken out: {why}")
            names = ", ".join(f"{host}'s agent does not answer ({why})" for host, why in silent)
            return self._finish(
                RolloutState.STOPPED,
                f"{names}; every agent is asked before a replica leaves the router, so none was "
                "taken out",
            )
        try:
            for start in range(0, len(todo), step):
                batch = todo[start : start + step]
                with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                    outcomes = list(pool.map(self._replica_outcome, batch))
                failed = [why for why in outcomes if why is not None]
                if failed:
                    raise _Stop(failed[0])
        except _Stop as stop:
            return self._finish(RolloutState.STOPPED, str(stop))
        except _Halt:
            assert self._view is not None
            return self._view
        return self._finish(RolloutState.DONE, None)

    def _silent_agents(self, hosts: list[str]) -> list[tuple[str, str]]:
        """Each of ``hosts`` whose agent does not answer its status, asked at once."""

        def ask(host: str) -> tuple[str, str] | None:
            try:
                self.agents[host].status()
            except AgentError as exc:
                return host, str(exc)
            return None

        if not hosts:
            return []
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            return [found for found in pool.map(ask, hosts) if found is not None]

    def _finish(self, state: RolloutState, reason: str | None) -> RolloutView:
        with self._lock:
            assert self._view is not None
            view = self._view
            for line in view.replicas:
                if line.phase is ReplicaPhase.WAITING:
                    view = view.with_replica(line.host, phase=ReplicaPhase.UNCHANGED)
            done = RolloutView(
                view.id, view.fleet, view.change, view.actor, state, view.replicas, reason
            )
            self._publish(done)
            return done

    def _replica_outcome(self, host: str) -> str | None:
        """Run one replica; None when it changed, else why the rollout must stop."""
        try:
            self._replica(host)
        except _Stop as stop:
            return str(stop)
        return None

    def _replica(self, host: str) -> None:
        assert self._view is not None
        url = self._view.replica(host).url  # as planned: the setting's, or the agent's word
        started = self.clock.monotonic()
        phase = self._phase(host)
        operation_id = self._view.replica(host).operation_id if self._view else None
        if phase is ReplicaPhase.RESIZING and operation_id is None:
            # The bot stopped between asking the agent and saving its answer: the agent may
            # have started the change already, and a second submit would restart it again.
            operation_id = self._started_at_agent(host)
            if operation_id is not None:
                self._set(host, operation_id=operation_id)
        if phase is ReplicaPhase.RESIZING and operation_id is not None:
            operation = self._follow(host, operation_id)  # a restarted bot picks it up
        elif phase is ReplicaPhase.ADDING:
            operation = None  # the change is made; put it back
        else:
            silent = self._silent_agents([host])
            if silent:
                why = silent[0][1]
                self._set(host, detail=f"not taken out: {why}")
                raise _Stop(f"{host} was not taken out of the router: its agent does not answer "
                            f"({why})")  # fmt: skip
            self._wait_for_others(host, url)
            started = self.clock.monotonic()  # out of the router from here
            self._take_out(host, url)
            operation = self._change(host)
        self._put_back(host, url, operation, started)

    def _wait_for_others(self, host: str, url: str) -> None:
        """Until every other worker the router holds is healthy with its breaker closed, and no
        more replicas than ``max_unavailable`` allows are out with ``host``: taking ``host`` out
        while the others' breakers are open leaves the router nothing to send to. Ends with
        ``host``'s line saying it is being taken out."""
        started = self.clock.monotonic()
        shown = self._view.replica(host).detail if self._view else None
        while True:
            self._check_halt()
            with self._out_lock:
                try:
                    workers = self.router.workers()
                    breakers, note = self._breakers()
                except RouterError as exc:
                    self._set(host, detail=f"not taken out: {exc}")
                    raise _Stop(f"{host} could not be taken out of the router: {exc}") from exc
                waiting = not_ready(
                    workers,
                    breakers,
                    url,
                    expected=self._others(host),
                    out=self._ours_out(host),
                    may_be_out=self.fleet.max_unavailable - 1,
                )
                if not waiting:
                    self._set(host, phase=ReplicaPhase.REMOVING, detail=note)
                    return
            names = ", ".join(f"{self._host_of(w.url)} ({w.why})" for w in waiting)
            stranded = self._stranded(w.url for w in waiting if w.why == "not in the router")
            if stranded:
                lost = "; ".join(f"{name} {why}" for name, why in stranded)
                why = (
                    f"the router does not have {names}, and nothing will put it back: {lost}; "
                    f"taking {host} out too would leave more than max_unavailable = "
                    f"{self.fleet.max_unavailable} replica(s) out"
                )
                self._set(host, detail=f"not taken out: {why}")
                raise _Stop(f"{host} was not taken out of the router: {why}")
            waited = self.clock.monotonic() - started
            if waited >= self.fleet.breaker_timeout_s:
                why = (
                    f"after {self.fleet.breaker_timeout_s:g} s the router still had {names}; "
                    "taking it out would leave the router too little to send to (a breaker "
                    "closes only once requests reach its replica again)"
                )
                self._set(host, detail=f"not taken out: {why}")
                raise _Stop(f"{host} was not taken out of the router: {why}")
            detail = f"waiting for {names} in the router"
            if note is not None:
                detail = f"{detail}; {note}"
            if detail != shown:
                self._set(host, detail=detail)
                shown = detail
            self.clock.sleep(min(self.fleet.poll_interval_s, 0.5))

    def _breakers(self) -> tuple[Mapping[str, Breaker] | None, str | None]:
        """The router's breakers, and what to say when it shows none (its health view only)."""
        try:
            found = self.router.breakers()
        except RouterError as exc:
            return None, f"no breaker state ({exc}): checked the router's health view only"
        if found is None:
            return None, (
                f"router {self.router.api().value} shows no circuit breakers: checked its "
                "health view only"
            )
        return found, None

    def _others(self, host: str) -> tuple[str, ...]:
        """Every other replica of the fleet, by URL: whatever has one out of the router, it
        counts against max_unavailable."""
        return tuple(url for name, url in self.members.items() if name != host)

    def _ours_out(self, host: str) -> tuple[str, ...]:
        """The other replicas this rollout has out of the router (or is taking out)."""
        assert self._view is not None
        return tuple(r.url for r in self._view.replicas if r.host != host and r.phase in _OUT)

    def _host_of(self, url: str) -> str:
        return next((h for h, u in self.members.items() if u == url.rstrip("/")), url)

    def _stranded(self, urls: Iterable[str]) -> list[tuple[str, str]]:
        """Of the replicas out of the router at ``urls``, those nothing will put back, and why:
        its agent does not answer, its last operation failed, its server is down, or it serves
        but was left out. One whose agent runs an operation may be put back by it: waited for."""
        found = []
        for url in urls:
            host = self._host_of(url)
            agent = self.agents.get(host)
            if agent is None:
                continue
            why = _why_not_back(agent, f"'fleet {self.fleet.name} rejoin {host}'")
            if why is not None:
                found.append((host, why))
        return found

    def _take_out(self, host: str, url: str) -> None:
        try:
            self.router.remove(url)
            self._until(lambda: self.router.worker(url) is None, REMOVAL_TIMEOUT_S)
        except (RouterError, TimeoutError) as exc:
            self._set(host, phase=ReplicaPhase.UNCHANGED, detail=f"not removed: {exc}")
            raise _Stop(f"{host} could not be taken out of the router: {exc}") from exc
        self._set(host, phase=ReplicaPhase.DRAINING)
        drained = wait_idle(
            self.probe,
            url,
            self.clock,
            self.fleet.drain_timeout_s,
            self.fleet.drain_polls,
            self.fleet.poll_interval_s,
            stop=self._halted.is_set,
        )
        self._check_halt()
        if not drained.idle:
            running = "an unknown number of" if drained.busy is None else str(drained.busy)
            timeout = (
                f"drain timeout {self.fleet.drain_timeout_s:g} s reached with {running} "
                "requests running; SGLang's own SIGTERM drain finishes them"
            )
            note = self._view.replica(host).detail if self._view else None
            self._set(host, detail=timeout if note is None else f"{timeout}; {note}")

    def _change(self, host: str) -> AgentOperation:
        agent = self.agents[host]
        change = self.change
        # The phase saved first is the intent: a bot stopped before the answer is saved finds
        # the operation at the agent on resume (a retried replica's old one is cleared here).
        self._set(host, phase=ReplicaPhase.RESIZING, operation_id=None)
        try:
            # Planned again on fresh facts: the plan made before the rollout is a gate, and the
            # agent refuses a fingerprint older than its facts.
            fingerprint = (
                agent.plan(ratio=change.ratio, size_gb=change.size_gb).fingerprint
                if change.ratio is not None or change.size_gb is not None
                else None
            )
            operation = agent.submit(
                change.kind,
                actor=self._actor,
                ratio=change.ratio,
                size_gb=change.size_gb,
                fingerprint=fingerprint,
            )
        except AgentError as exc:
            self._restore(host, self._view.replica(host).url if self._view else "")
            self._set(host, phase=ReplicaPhase.UNCHANGED, detail=str(exc))
            raise _Stop(f"{host}'s agent did not start the change: {exc}") from exc
        self._set(host, operation_id=operation.id)
        return self._follow(host, operation.id)

    def _started_at_agent(self, host: str) -> int | None:
        """The operation this rollout asked ``host``'s agent for, when the agent has one: the
        newest of the rollout's kind by its actor since it started."""
        try:
            return started_operation(self.agents[host], self.change.kind, self._actor, self.since)
        except AgentError as exc:
            self._set(host, detail=f"not resumed: {exc}")
            raise _Stop(
                f"{host}'s agent could not say whether it started the change ({exc}); "
                "resume once it answers"
            ) from exc

    @property
    def _actor(self) -> str:
        assert self._view is not None
        return self._view.actor

    def _follow(self, host: str, operation_id: int) -> AgentOperation:
        agent, after = self.agents[host], 0
        while True:
            self._check_halt()
            try:
                page = agent.events(operation_id, after=after, wait_s=self.event_wait_s)
            except AgentError:
                self.clock.sleep(self.fleet.poll_interval_s)  # the agent's restart: ask again
                continue
            after = page.last_seq
            if page.operation.finished:
                return page.operation

    def _put_back(
        self, host: str, url: str, operation: AgentOperation | None, started: float
    ) -> None:
        state = None if operation is None else operation.state
        if state is OperationState.FAILED:
            assert operation is not None
            self._set(
                host,
                phase=ReplicaPhase.FAILED,
                revision=operation.revision,
                detail=f"did not start and its old config did not either: {operation.outcome}",
                seconds=self.clock.monotonic() - started,
            )
            raise _Stop(f"{host} is down: its new config and its old one both failed to start")
        revision = None if operation is None else operation.revision
        self._set(host, phase=ReplicaPhase.ADDING, revision=revision)
        healthy = self._restore(host, url)
        elapsed = self.clock.monotonic() - started
        if state is OperationState.ROLLED_BACK:
            assert operation is not None
            self._set(
                host,
                phase=ReplicaPhase.ROLLED_BACK,
                detail=f"its new config failed; back on its old one: {operation.outcome}",
                seconds=elapsed,
            )
            raise _Stop(f"{host}'s new config failed and was rolled back")
        if not healthy:
            self._set(host, phase=ReplicaPhase.FAILED, seconds=elapsed)
            raise _Stop(f"{host} was not reported healthy by the router")
        self._set(host, phase=ReplicaPhase.DONE, seconds=elapsed)

    def _restore(self, host: str, url: str) -> bool:
        """Add ``url`` back and wait until the router reports it healthy; False on timeout."""
        try:
            self.router.add(url)
            self._until(lambda: _healthy(self.router.worker(url)), self.fleet.healthy_timeout_s)
        except (RouterError, TimeoutError) as exc:
            self._set(host, detail=f"not healthy in the router: {exc}")
            return False
        return True

    def _until(self, check: Callable[[], bool], timeout_s: float) -> None:
        deadline = self.clock.monotonic() + timeout_s
        while not check():
            self._check_halt()
            if self.clock.monotonic() >= deadline:
                raise TimeoutError(f"not within {timeout_s:g} s")
            self.clock.sleep(min(self.fleet.poll_interval_s, 0.5))


def _healthy(worker: RouterWorker | None) -> bool:
    return worker is not None and worker.healthy


def _why_not_back(agent: ReplicaAgent, rejoin: str) -> str | None:
    """Why a replica out of the router will not come back on its own, as its agent tells it;
    None while its agent runs an operation (which may end with it back)."""
    try:
        status: AgentStatus = agent.status()
        running = status.operation
        last = running or next(iter(agent.operations(1)), None)
    except AgentError as exc:
        return f"(its agent does not answer: {exc})"
    if last is not None and not last.finished:
        return None
    if last is not None and last.state is OperationState.FAILED:
        return f"(its agent's operation {last.id} failed: its server is down)"
    if status.server_state is ServerState.RUNNING and status.health_code == 200:
        return f"(it serves, but nothing put it back in the router: {rejoin} does)"
    return f"(its server is {status.server_state.value}, health {status.health_code})"
