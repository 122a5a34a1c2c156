"""The agent's facts service: one snapshot of host and server, its fingerprint, and plans on it.

Everything is read fresh per call (probe, server control, the SGLang client, the agent's state are
cheap to ask), so a plan is always made on what the host looks like now. A failing source does
not fail the snapshot: its part is left empty and the reason is listed in ``problems``; only a
plan, which cannot be made without host RAM or the server's command line, raises.

The fingerprint names the facts a proposal depends on: the HiCache flags of the command line, the
server's pid and start time, and its SGLang version. A proposal made on one fingerprint is stale
once any of them changed (the server restarted, someone edited the flags)::

    fingerprint_of(HiCacheSetting(enabled=True, ratio=2.0), pid=4242, started_at=1767000000.5,
                   version="0.5.9")
    -> "3f1c0a9e5d7b2c41"   (16 hex digits of a SHA-256)
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Protocol

from bot.agent.cmdline import HiCacheSetting, Topology, read_hicache, read_topology
from bot.agent.config import AgentSettings
from bot.agent.facts._capacity import CapacityReader
from bot.agent.facts._planning import plan_on
from bot.agent.facts._values import Capacity, FactsSnapshot, ServerSnapshot
from bot.agent.host.probe import GpuFacts, HostProbe, RamFacts, ServerCgroup
from bot.clock import Clock
from bot.errors import KimiOpsError, ProbeError
from bot.planner import ChangeRequest, Plan, StartSample
from bot.vocab import ServerState

__all__ = [
    "Capacity",
    "FactsService",
    "FactsSnapshot",
    "ServerSnapshot",
    "fingerprint_of",
]


class _ProcessState(Protocol):
    """What facts read of ``ServerControl.status()``."""

    @property
    def state(self) -> ServerState: ...

    @property
    def main_pid(self) -> int | None: ...

    @property
    def started_at(self) -> float | None: ...  # epoch seconds


class _Control(Protocol):
    def read_command(self) -> list[str]: ...

    def status(self) -> _ProcessState: ...

    def cgroup(self) -> ServerCgroup: ...

    def last_run_key(self) -> str | None: ...

    def last_run_log(self, max_bytes: int) -> str: ...


class _SGLang(Protocol):
    def health(self) -> int | None: ...

    def server_info(self) -> dict[str, Any] | None: ...


class _State(Protocol):
    def startup_samples(self) -> list[StartSample]: ...

    def last_start_capacity(self) -> tuple[int, float | None, int | None, float | None] | None: ...


def fingerprint_of(
    hicache: HiCacheSetting | None, pid: int | None, started_at: float | None, version: str | None
) -> str:
    """16 hex digits naming the HiCache flags, the server's pid and start time, and its version."""
    effective = None if hicache is None else hicache.effective()
    payload = {
        "hicache": None
        if effective is None
        else [effective.enabled, effective.ratio, effective.size_gb],
        "pid": pid,
        # psutil and systemd give start times to different precisions; 10 ms tells restarts apart.
        "started_at": None if started_at is None else round(started_at, 2),
        "version": version,
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return digest[:16]


class FactsService:
    """Host and server facts for status and plans. Safe to call from several threads."""

    def __init__(
        self,
        settings: AgentSettings,
        probe: HostProbe,
        control: _Control,
        sglang: _SGLang,
        state: _State,
        clock: Clock,
    ) -> None:
        self._settings = settings
        self._probe = probe
        self._control = control
        self._sglang = sglang
        self._state = state
        self._clock = clock
        # The version is only served while the server answers; remember it per server instance
        # so a busy /server_info does not change the fingerprint (and void every proposal).
        self._versions: dict[tuple[int, float | None], str] = {}
        self._capacity = CapacityReader(control, state)
        self._lock = threading.Lock()

    # -- the snapshot ------------------------------------------------------------------------

    def snapshot(self) -> FactsSnapshot:
        """Read everything once. Never raises for a failing source; see ``problems``."""
        errors: list[KimiOpsError] = []
        command, hicache, topology = self._command(errors)
        server, info = self._server(errors)
        ram = self._ram(errors, ServerCgroup(pid=server.pid))
        held = 0
        if server.pid is not None and ram is not None:
            try:
                held = self._probe.released_by_stop(server.pid, ram)
            except ProbeError as exc:
                errors.append(exc)
        gpus = self._gpus(errors)
        capacity = self._capacity.read(info, hicache, topology, errors, server.state.running)
        return FactsSnapshot(
            host=self._settings.host_name,
            backend=self._settings.backend,
            probe=self._settings.probe,
            server=server,
            command=command,
            hicache=hicache,
            topology=topology,
            capacity=capacity,
            ram=ram,
            server_held_bytes=held,
            gpus=gpus,
            fingerprint=fingerprint_of(hicache, server.pid, server.started_at, server.version),
            problems=tuple(str(error) for error in errors),
            errors=tuple(errors),
            guard=self._settings.guard,
        )

    def _command(
        self, errors: list[KimiOpsError]
    ) -> tuple[tuple[str, ...] | None, HiCacheSetting | None, Topology | None]:
        try:
            argv = self._control.read_command()
            return tuple(argv), read_hicache(argv), read_topology(argv)
        except KimiOpsError as exc:
            errors.append(exc)
            return None, None, None

    def _server(self, errors: list[KimiOpsError]) -> tuple[ServerSnapshot, dict[str, Any] | None]:
        try:
            process = self._control.status()
        except KimiOpsError as exc:
            errors.append(exc)
            return ServerSnapshot(state=ServerState.UNKNOWN), None
        alive = process.state.running
        pid = process.main_pid if alive else None
        started_at = process.started_at if alive else None
        health = self._sglang.health() if alive else None
        info = self._sglang.server_info() if alive and health is not None else None
        key = (pid or 0, started_at)
        version = info.get("version") if info is not None else None
        with self._lock:
            if isinstance(version, str) and pid is not None:
                self._versions = {key: version}  # only the current instance is worth keeping
            elif pid is not None:
                version = self._versions.get(key)
            else:
                version = None
        state = process.state
        if state is ServerState.RUNNING and health != 200:
            state = ServerState.STARTING
        uptime = None
        if started_at is not None:
            uptime = round(max(0.0, self._clock.now().timestamp() - started_at), 1)
        return (
            ServerSnapshot(
                state=state,
                health_code=health,
                version=version if isinstance(version, str) else None,
                pid=pid,
                started_at=started_at,
                uptime_s=uptime,
            ),
            info,
        )

    def _ram(self, errors: list[KimiOpsError], running: ServerCgroup) -> RamFacts | None:
        """Host RAM and the server's memory domain: the running server's cgroup, else the one
        its backend will start it in."""
        try:
            where = running if running.pid is not None else self._control.cgroup()
            return self._probe.ram(where)
        except KimiOpsError as exc:
            errors.append(exc)
            return None

    def _gpus(self, errors: list[KimiOpsError]) -> GpuFacts:
        try:
            return self._probe.gpus()
        except KimiOpsError as exc:
            errors.append(exc)
            return GpuFacts(available=False, reason=str(exc))

    # -- status and plans --------------------------------------------------------------------

    def plan(self, request: ChangeRequest) -> tuple[Plan, str]:
        """The planner's Plan for ``request`` on facts read now, and their fingerprint.

        Raises the probe's or the backend's error when host RAM or the command line is unknown.
        """
        snap = self.snapshot()
        return self.plan_on(snap, request), snap.fingerprint

    def plan_on(self, snap: FactsSnapshot, request: ChangeRequest) -> Plan:
        """The Plan for ``request`` on an existing snapshot."""
        history = self._state.startup_samples()
        return plan_on(snap, request, self._settings.headroom_gb, history)
