"""The agent's facts: one snapshot of host and server, its fingerprint, and plans made on it.

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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from bot.agent.cmdline import HiCacheSetting, Topology, read_hicache, read_topology
from bot.agent.config import AgentSettings, GuardSettings
from bot.agent.engine.guard import guard_note
from bot.agent.facts._model_files import ModelFiles, read_model_files
from bot.agent.facts._sources import (
    LOG_RUN_BYTES,
    LogPools,
    device_from_info,
    kv_gib_from_info,
    model_hints,
    page_size,
    pools_of,
    report_of_text,
    version_of,
)
from bot.agent.host.probe import GpuFacts, HostProbe, RamFacts
from bot.clock import Clock
from bot.errors import KimiOpsError, PlanInputError, ProbeError
from bot.planner import (
    GB,
    ChangeRequest,
    DeviceMemory,
    DevicePool,
    DevicePoolSource,
    GiB,
    HostExtra,
    HostMemory,
    Plan,
    ServerFacts,
    StartSample,
    default_mem_fraction_static,
    host_pool_for_ratio,
    host_pool_for_size,
    make_plan,
)
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

    def last_run_key(self) -> str | None: ...

    def last_run_log(self, max_bytes: int) -> str: ...


class _SGLang(Protocol):
    def health(self) -> int | None: ...

    def server_info(self) -> dict[str, Any] | None: ...


class _State(Protocol):
    def startup_samples(self) -> list[StartSample]: ...

    def last_start_capacity(self) -> tuple[int, float | None, int | None, float | None] | None: ...


@dataclass(frozen=True)
class ServerSnapshot:
    """The server as seen now: ``state`` is ``ServerState`` (``starting`` also while the process
    runs but ``/health`` does not answer 200 yet; ``unknown`` when the backend could not tell)."""

    state: ServerState
    health_code: int | None = None
    version: str | None = None
    pid: int | None = None
    started_at: float | None = None
    uptime_s: float | None = None


@dataclass(frozen=True)
class Capacity:
    """KV capacity per rank: the device pool and the HiCache host pool. ``source`` says where the
    device figures came from (server_info, startup_log, last_start) or None (unknown)."""

    device_tokens: int | None = None
    kv_bytes_per_token: float | None = None
    host_tokens_per_rank: int | None = None
    host_gb_per_rank: float | None = None
    ranks: int | None = None
    page_size: int = 1
    source: DevicePoolSource | None = None
    # For plans: the device pool's GiB as logged (two decimals), the last start's other host
    # pools, and what its log says of a draft pool or of pools it could not tell apart.
    kv_gib: float | None = None
    host_extras: tuple[HostExtra, ...] = ()
    draft_kv_gib: float | None = None
    device_pool_undecided: str | None = None


@dataclass(frozen=True)
class FactsSnapshot:
    """One reading of host and server; ``None`` parts could not be read (see ``problems``)."""

    host: str
    backend: str
    probe: str
    server: ServerSnapshot
    command: tuple[str, ...] | None
    hicache: HiCacheSetting | None
    topology: Topology | None
    capacity: Capacity
    ram: RamFacts | None
    server_held_bytes: int
    gpus: GpuFacts
    fingerprint: str
    problems: tuple[str, ...] = ()
    errors: tuple[KimiOpsError, ...] = field(default=(), repr=False, compare=False)
    guard: GuardSettings = field(default_factory=GuardSettings)


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
        self._log_cache: tuple[str, LogPools] | None = None
        self._lock = threading.Lock()

    # -- the snapshot ------------------------------------------------------------------------

    def snapshot(self) -> FactsSnapshot:
        """Read everything once. Never raises for a failing source; see ``problems``."""
        errors: list[KimiOpsError] = []
        command, hicache, topology = self._command(errors)
        server, info = self._server(errors)
        ram = self._ram(errors)
        held = 0
        if server.pid is not None:
            try:
                held = self._probe.process_tree_rss(server.pid)
            except ProbeError as exc:
                errors.append(exc)
        gpus = self._gpus(errors)
        capacity = self._capacity(info, hicache, topology, errors, server.state.running)
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

    def _ram(self, errors: list[KimiOpsError]) -> RamFacts | None:
        try:
            return self._probe.ram()
        except KimiOpsError as exc:
            errors.append(exc)
            return None

    def _gpus(self, errors: list[KimiOpsError]) -> GpuFacts:
        try:
            return self._probe.gpus()
        except KimiOpsError as exc:
            errors.append(exc)
            return GpuFacts(available=False, reason=str(exc))

    def _capacity(
        self,
        info: dict[str, Any] | None,
        hicache: HiCacheSetting | None,
        topology: Topology | None,
        errors: list[KimiOpsError],
        running: bool = False,
    ) -> Capacity:
        ranks = None if topology is None else topology.local_ranks
        pages = page_size(info, topology)
        tokens, per_token = device_from_info(info)
        kv_gib = kv_gib_from_info(info) if tokens is not None else None
        source = DevicePoolSource.SERVER_INFO if tokens is not None else None
        host_tokens: int | None = None
        host_gb: float | None = None
        logged = self._device_from_log(running)
        if tokens is None and logged.tokens is not None:
            tokens, per_token, kv_gib, source = (
                logged.tokens,
                logged.per_token,
                logged.kv_gib,
                DevicePoolSource.STARTUP_LOG,
            )
            host_tokens, host_gb = logged.host_tokens, logged.host_gb
        try:
            recorded = self._state.last_start_capacity()
        except KimiOpsError as exc:
            errors.append(exc)
            recorded = None
        if recorded is not None:
            rec_tokens, rec_per_token, rec_host_tokens, rec_host_gb = recorded
            if tokens is None and rec_tokens:
                tokens, per_token, source = (
                    int(rec_tokens),
                    rec_per_token,
                    DevicePoolSource.LAST_START,
                )
                if rec_per_token:
                    # Recorded as the logged GiB divided by the tokens: that GiB, as logged.
                    kv_gib = round(rec_per_token * tokens / GiB, 2)
            if host_gb is None:
                host_tokens, host_gb = rec_host_tokens or None, rec_host_gb or None
        if host_gb is None and hicache is not None and hicache.enabled:
            # No record of a start: size the pool from the flags, as SGLang will.
            pool = DevicePool(tokens=tokens, bytes_per_token=per_token)
            effective = hicache.effective()
            size = (
                host_pool_for_size(effective.size_gb, pool, pages)
                if effective.size_gb is not None
                else host_pool_for_ratio(effective.ratio or 0.0, pool, pages)
            )
            if size is not None:
                host_tokens, host_gb = size.tokens, round(size.bytes / GB, 2)
        return Capacity(
            device_tokens=tokens,
            kv_bytes_per_token=None if per_token is None else round(per_token, 1),
            host_tokens_per_rank=host_tokens,
            host_gb_per_rank=host_gb,
            ranks=ranks,
            page_size=pages,
            source=source,
            kv_gib=kv_gib,
            host_extras=logged.host_extras,
            draft_kv_gib=logged.draft_kv_gib,
            device_pool_undecided=logged.undecided
            if source is DevicePoolSource.STARTUP_LOG
            else None,
        )

    def _device_from_log(self, running: bool = False) -> LogPools:
        """Device pool and host pools per rank from the beginning of the server's last run (the
        log file or the journal): the device pool when the server is down, the draft pool and
        the extra host pools always.

        A parse is kept for the run only once it is complete (ready, failed, or its host pool
        logged and the server no longer running): those lines never change after that. A run
        still starting is read again on each call (at most LOG_RUN_BYTES), so a parse taken
        before its pool lines (a DSA indexer's comes after the KV host pool) is not kept.
        """
        nothing = LogPools()
        try:
            key = self._control.last_run_key()
            if key is None:
                return nothing
            with self._lock:
                cached = self._log_cache
            if cached is not None and cached[0] == key:
                return cached[1]
            report = report_of_text(self._control.last_run_log(LOG_RUN_BYTES))
            pools = pools_of(report)
            done = report.ready or report.failure is not None
            if pools.tokens is not None and (done or (pools.host_gb is not None and not running)):
                with self._lock:
                    self._log_cache = (key, pools)
        except KimiOpsError:
            return nothing
        return pools

    # -- status and plans --------------------------------------------------------------------

    def plan(self, request: ChangeRequest) -> tuple[Plan, str]:
        """The planner's Plan for ``request`` on facts read now, and their fingerprint.

        Raises the probe's or the backend's error when host RAM or the command line is unknown.
        """
        snap = self.snapshot()
        return self.plan_on(snap, request), snap.fingerprint

    def plan_on(self, snap: FactsSnapshot, request: ChangeRequest) -> Plan:
        """The Plan for ``request`` on an existing snapshot."""
        if snap.ram is None or snap.topology is None or snap.hicache is None:
            missing = [name for name, value in (("host RAM", snap.ram), ("the command line",
                       snap.topology)) if value is None]  # fmt: skip
            raise next(
                iter(snap.errors),
                ProbeError(f"cannot plan without {' and '.join(missing) or 'the HiCache flags'}"),
            )
        capacity = snap.capacity
        memory = HostMemory(
            available_bytes=snap.ram.available_bytes,
            server_held_bytes=snap.server_held_bytes,
            cgroup_limit_bytes=snap.ram.cgroup_limit_bytes,
        )
        hints = model_hints(snap.command or ())
        model = read_model_files(hints.model_path, snap.topology.tp, hints.kv_cache_dtype)
        pool = DevicePool(
            tokens=capacity.device_tokens, bytes_per_token=capacity.kv_bytes_per_token
        )
        device, device_missing = (None, None)
        if capacity.device_tokens is None:
            device, device_missing = device_memory(snap.topology, snap.gpus, model)
        if capacity.kv_gib is not None:
            pool = DevicePool.from_log(capacity.device_tokens, capacity.kv_gib)
        draft = capacity.draft_kv_gib
        server = ServerFacts(
            ranks=capacity.ranks or 1,
            device_pool=pool,
            page_size=capacity.page_size,
            version=version_of(snap.server.version),
            host_tokens_per_rank_now=capacity.host_tokens_per_rank,
            radix_cache_disabled=snap.topology.disable_radix_cache,
            kv_shape=model.kv_shape,
            speculative=hints.speculative,
            device_pool_note=None
            if draft is None
            else f"a draft model's pool of {draft:.2f} GiB per rank beside it is not multiplied",
            device_pool_undecided=capacity.device_pool_undecided,
            host_extras=capacity.host_extras,
            device_pool_source=capacity.source,
            device_memory=device,
            device_pool_missing=device_missing,
        )
        history: Sequence[StartSample] = self._state.startup_samples()
        plan = make_plan(
            request, server, memory, headroom_gb=self._settings.headroom_gb, history=history
        )
        return replace(plan, notes=(*plan.notes, guard_note(snap.guard, plan.budget_bytes)))


def device_memory(
    topology: Topology, gpus: GpuFacts, model: ModelFiles
) -> tuple[DeviceMemory | None, str | None]:
    """What the planner needs to estimate a device pool no start has logged: the smallest GPU's
    memory (NVML), the weights per rank and the fraction; else None and what is missing."""
    missing = list(model.missing)
    gpu_bytes = min((gpu.memory_total_bytes for gpu in gpus.gpus), default=0)
    if gpu_bytes <= 0:
        missing.append(f"GPU memory is unknown ({gpus.reason or 'NVML lists no GPU'})")
    if missing or model.weights_bytes is None:
        return None, "; ".join(missing) or "the weights' size is unknown"
    ranks = max(1, topology.tp * topology.pp)
    fraction = topology.mem_fraction_static
    try:
        return DeviceMemory(
            gpu_memory_bytes=gpu_bytes,
            weights_bytes_per_rank=model.weights_bytes // ranks,
            mem_fraction_static=fraction
            if fraction is not None
            else default_mem_fraction_static(gpu_bytes, topology.tp, topology.pp),
            fraction_given=fraction is not None,
        ), None
    except PlanInputError as exc:
        return None, str(exc)
