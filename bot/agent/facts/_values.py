"""The facts' frozen values: the server as seen now, its KV capacity, and one snapshot of both
with the host's RAM and GPUs (what ``/v1/status`` shows and plans are made on)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.agent.cmdline import HiCacheSetting, Topology
from bot.agent.config import GuardSettings
from bot.agent.host.probe import GpuFacts, RamFacts
from bot.errors import KimiOpsError
from bot.planner import DevicePoolSource, HostExtra, HybridPools
from bot.vocab import ServerState

__all__ = ["Capacity", "FactsSnapshot", "ServerSnapshot"]


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
    # A hybrid sliding-window model's two device pools, from the last start's log.
    hybrid_pools: HybridPools | None = None


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
