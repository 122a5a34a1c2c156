"""A host agent's ``GET /v1/status`` answer, for :mod:`bot.agent_json`: the server, its HiCache
config and capacity, the host's RAM and GPUs, the running operation and the server's metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bot._agent_fields import Json, enum_value, field_of, mapping, number, optional, texts, whole
from bot._agent_live import LiveStorage
from bot._agent_memory import MemoryWatchView
from bot._agent_operations import AgentOperation
from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.prometheus import ServerMetrics
from bot.vocab import ServerState

__all__ = ["AgentStatus"]


@dataclass(frozen=True)
class AgentStatus:
    """``GET /v1/status``: the figures ``status`` shows."""

    host: str
    server_state: ServerState
    health_code: int | None
    version: str | None
    uptime_s: float | None
    hicache: HiCacheSetting | None
    effective: str | None
    device_tokens: int | None
    host_tokens_per_rank: int | None
    host_gb_per_rank: float | None
    ranks: int | None
    ram_total_gb: float | None
    ram_available_gb: float | None
    ram_server_held_gb: float | None
    gpus: tuple[Json, ...]
    gpus_reason: str | None
    operation: AgentOperation | None
    fingerprint: str
    problems: tuple[str, ...]
    raw: Json = field(repr=False, compare=False)
    # The server's /metrics as figures; None from an agent that does not send them (older
    # than the field) or a server that serves none.
    metrics: ServerMetrics | None = None
    #: The server's URL as a fleet's router reaches it (``[agent] router_url``, else its own
    #: URL); None from agents older than this field.
    router_url: str | None = None
    #: The server's memory domain: the level whose limit binds (``/system.slice (memory.high)``),
    #: that limit, and what the domain gives (host and cgroup); None from older agents or
    #: without a cgroup limit.
    ram_cgroup_limit_from: str | None = None
    ram_cgroup_limit_gb: float | None = None
    ram_headroom_gb: float | None = None
    #: The post-ready memory watch: its notices and whether the headroom is under the floor.
    memory: MemoryWatchView = field(default_factory=MemoryWatchView)
    #: HiCache's storage tier live (SGLang's GET) beside the command line's; None when the
    #: agent holds no admin key or is older than the field.
    storage: LiveStorage | None = None

    @classmethod
    def from_json(cls, body: object) -> AgentStatus:
        where = "the agent's status"
        status = mapping(body, where)
        host = mapping(field_of(status, "host", Mapping, where), f"{where}'s host")
        server = mapping(field_of(status, "server", Mapping, where), f"{where}'s server")
        config = mapping(status.get("config") or {}, f"{where}'s config")
        capacity = mapping(status.get("capacity") or {}, f"{where}'s capacity")
        ram = mapping(status.get("ram") or {}, f"{where}'s ram")
        gpus = mapping(status.get("gpus") or {}, f"{where}'s gpus")
        operation = status.get("operation")
        enabled = config.get("enable_hierarchical_cache")
        hicache = None
        if enabled is not None:
            hicache = HiCacheSetting(
                enabled=bool(enabled),
                ratio=number(config, "hicache_ratio", f"{where}'s config"),
                size_gb=whole(config, "hicache_size", f"{where}'s config"),
                write_policy=optional(config, "hicache_write_policy", str, f"{where}'s config"),
                io_backend=optional(config, "hicache_io_backend", str, f"{where}'s config"),
            )
        devices = optional(gpus, "devices", list, f"{where}'s gpus") or []
        return cls(
            host=field_of(host, "name", str, f"{where}'s host"),
            server_state=enum_value(
                ServerState, field_of(server, "state", str, f"{where}'s server"), "server state"
            ),
            health_code=optional(server, "health_code", int, f"{where}'s server"),
            version=optional(server, "version", str, f"{where}'s server"),
            uptime_s=number(server, "uptime_s", f"{where}'s server"),
            hicache=hicache,
            effective=optional(config, "effective", str, f"{where}'s config"),
            device_tokens=whole(capacity, "device_tokens", f"{where}'s capacity"),
            host_tokens_per_rank=whole(capacity, "host_tokens_per_rank", f"{where}'s capacity"),
            host_gb_per_rank=number(capacity, "host_gb_per_rank", f"{where}'s capacity"),
            ranks=whole(capacity, "ranks", f"{where}'s capacity"),
            ram_total_gb=number(ram, "total_gb", f"{where}'s ram"),
            ram_available_gb=number(ram, "available_gb", f"{where}'s ram"),
            ram_server_held_gb=number(ram, "server_held_gb", f"{where}'s ram"),
            gpus=tuple(mapping(gpu, f"{where}'s gpu") for gpu in devices),
            gpus_reason=optional(gpus, "reason", str, f"{where}'s gpus"),
            operation=None if not operation else AgentOperation.from_json(operation),
            fingerprint=str(status.get("fingerprint") or ""),
            problems=texts(status, "problems", where),
            raw=dict(status),
            metrics=_metrics(status.get("metrics"), f"{where}'s metrics"),
            router_url=optional(server, "router_url", str, f"{where}'s server"),
            ram_cgroup_limit_from=optional(ram, "cgroup_limit_from", str, f"{where}'s ram"),
            ram_cgroup_limit_gb=number(ram, "cgroup_limit_gb", f"{where}'s ram"),
            ram_headroom_gb=number(ram, "headroom_gb", f"{where}'s ram"),
            memory=MemoryWatchView.from_json(status.get("memory_watch"), f"{where}'s memory_watch"),
            storage=LiveStorage.from_json(status.get("hicache_live")),
        )


def _metrics(body: object, where: str) -> ServerMetrics | None:
    """``{"token_usage": 0.42, "running_requests": 3, "queued_requests": 0, "cache_hit_rate":
    0.31, "host_total_tokens": null}``; fractions must lie in 0..1, counts be whole."""
    if body is None:
        return None
    figures = mapping(body, where)
    fractions = {key: number(figures, key, where) for key in ("token_usage", "cache_hit_rate")}
    for key, value in fractions.items():
        if value is not None and not 0.0 <= value <= 1.0:
            raise AgentError(f"{where}'s {key!r} is {value!r}, not a fraction between 0 and 1")
    counts = {
        key: whole(figures, key, where)
        for key in ("running_requests", "queued_requests", "host_total_tokens")
    }
    for key, count in counts.items():
        if count is not None and count < 0:
            raise AgentError(f"{where}'s {key!r} is {count!r}, not a count")
    return ServerMetrics(
        token_usage=fractions["token_usage"],
        running_requests=counts["running_requests"],
        queued_requests=counts["queued_requests"],
        cache_hit_rate=fractions["cache_hit_rate"],
        host_total_tokens=counts["host_total_tokens"],
    )
