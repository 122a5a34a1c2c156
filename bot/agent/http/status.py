"""The ``/v1/status`` body: a snapshot laid out as JSON, GB figures in GB (1e9) beside the bytes.

A running server on the simulated 449 GB host gives, in part::

    {"host": {"name": "kimi-01", "backend": "process", "probe": "sim"},
     "server": {"state": "running", "health_code": 200, "version": "0.5.9", "pid": 4242,
                "uptime_s": 812.4, "router_url": "http://10.0.0.11:30000"},
     "config": {"enable_hierarchical_cache": true, "hicache_ratio": 2.0, "hicache_size": null,
                "effective": "ratio 2 x device pool"},
     "capacity": {"device_tokens": 159274, "kv_bytes_per_token": 70247.4,
                  "host_tokens_per_rank": 318549, "host_gb_per_rank": 22.39, "ranks": 8},
     "ram": {"total_gb": 449.0, "available_gb": 237.9, "server_held_gb": 207.1,
             "cgroup": "/system.slice/sglang.service", "cgroup_limit_gb": 300.0,
             "cgroup_limit_from": "/system.slice/sglang.service (memory.max)",
             "cgroup_headroom_gb": 92.9, "headroom_gb": 92.9, ...},
     "gpus": {"available": true, "reason": null, "devices": [{"index": 0, ...}]},
     "guard": {"enabled": true, "interval_s": 0.5, "floor_gb": 10.74},
     "metrics": {"token_usage": 0.42, "running_requests": 3, "queued_requests": 0,
                 "cache_hit_rate": 0.31, "host_total_tokens": null},
     "operation": null, "fingerprint": "3f1c0a9e5d7b2c41", "problems": []}

``ram`` is the server's memory domain: ``cgroup`` its memory cgroup (null: none known),
``cgroup_limit_from`` the level and file whose limit leaves the least, ``cgroup_headroom_gb``
what that level leaves (limit less usage less reclaimable file pages) and ``headroom_gb`` the
smaller of it and ``available_gb``, as SGLang counts it; ``server_held_gb`` is what stopping the
server frees, each page once.
``memory_watch`` is the post-ready memory watch (``bot.agent.engine.post_ready``): its floor,
whether the headroom is under it now, and its recent notices, each numbered (``seq``) so the bot
posts each once::

    "memory_watch": {"floor_gb": 10.74, "below_floor": true, "last_headroom_gb": 8.2, ...,
                     "notices": [{"seq": 1, "at": "2026-02-24T11:31:02.114+00:00",
                                  "where": "host", "headroom_gb": 8.2, "available_gb": 8.2,
                                  "cgroup_limit_gb": null, "floor_gb": 10.74,
                                  "message": "after ready: host RAM available fell to ..."}]}

``metrics`` is the server's own ``/metrics`` read as figures (null when it serves none: SGLang
without ``--enable-metrics``, or not up); added after the rest, so older bots ignore it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from bot.agent.cmdline import redact_secrets
from bot.agent.host.probe import GpuFacts, RamFacts
from bot.planner import GB
from bot.prometheus import ServerMetrics

if TYPE_CHECKING:
    from bot.agent.facts.snapshot import FactsSnapshot

__all__ = ["status_body"]


def gb(n_bytes: float | None) -> float | None:
    """Bytes as GB (1e9), two decimals; None stays None."""
    return None if n_bytes is None else round(n_bytes / GB, 2)


def status_body(
    snap: FactsSnapshot,
    operation: dict[str, Any] | None,
    metrics: ServerMetrics | None = None,
    router_url: str | None = None,
    agent_problems: Sequence[str] = (),
    *,
    memory_watch: dict[str, Any] | None = None,
    memory_problem: str | None = None,
) -> dict[str, Any]:
    """The body; ``router_url`` is the server's URL as a fleet's router reaches it;
    ``agent_problems`` what the agent itself finds wrong (the log, the state directory, the
    configured command), listed after the facts' own problems; ``memory_watch`` is the
    post-ready watch's section (its floor and recent notices) and ``memory_problem`` its
    sentence while the headroom is under the floor."""
    server = snap.server
    hicache = snap.hicache
    capacity = snap.capacity
    return {
        "host": {"name": snap.host, "backend": snap.backend, "probe": snap.probe},
        "server": {
            "state": server.state,
            "health_code": server.health_code,
            "version": server.version,
            "pid": server.pid,
            "uptime_s": server.uptime_s,
            "started_at": server.started_at,
            "router_url": router_url,
        },
        "config": {
            "enable_hierarchical_cache": None if hicache is None else hicache.enabled,
            "hicache_ratio": None if hicache is None else hicache.ratio,
            "hicache_size": None if hicache is None else hicache.size_gb,
            "hicache_write_policy": None if hicache is None else hicache.write_policy,
            "hicache_io_backend": None if hicache is None else hicache.io_backend,
            "effective": None if hicache is None else hicache.effective_phrase(),
            "command": None if snap.command is None else redact_secrets(snap.command),
        },
        "capacity": {
            "device_tokens": capacity.device_tokens,
            "kv_bytes_per_token": capacity.kv_bytes_per_token,
            "host_tokens_per_rank": capacity.host_tokens_per_rank,
            "host_gb_per_rank": capacity.host_gb_per_rank,
            "ranks": capacity.ranks,
            "page_size": capacity.page_size,
            "source": capacity.source,
        },
        "ram": _ram(snap.ram, snap.server_held_bytes),
        "gpus": _gpus(snap.gpus),
        "guard": {
            "enabled": snap.guard.enabled,
            "interval_s": snap.guard.interval_s,
            "floor_gb": round(snap.guard.floor_gb, 2),
        },
        "metrics": None if metrics is None else asdict(metrics),
        "operation": operation,
        "fingerprint": snap.fingerprint,
        "problems": [
            *snap.problems,
            *agent_problems,
            *([memory_problem] if memory_problem else []),
        ],
        "memory_watch": memory_watch,
    }


def _ram(ram: RamFacts | None, held: int) -> dict[str, Any]:
    if ram is None:
        return {
            "total_gb": None,
            "available_gb": None,
            "server_held_gb": gb(held),
            "cgroup": None,
            "cgroup_limit_gb": None,
            "cgroup_limit_from": None,
            "cgroup_headroom_gb": None,
            "headroom_gb": None,
            "total_bytes": None,
            "available_bytes": None,
            "server_held_bytes": held,
            "cgroup_limit_bytes": None,
            "cgroup_headroom_bytes": None,
            "headroom_bytes": None,
        }
    limit_from = None
    if ram.cgroup_path is not None:
        limit_from = f"{ram.cgroup_path} ({ram.cgroup_limit_file})"
    return {
        "total_gb": gb(ram.total_bytes),
        "available_gb": gb(ram.available_bytes),
        "server_held_gb": gb(held),
        "cgroup": ram.cgroup,
        "cgroup_limit_gb": gb(ram.cgroup_limit_bytes),
        "cgroup_limit_from": limit_from,
        "cgroup_headroom_gb": gb(ram.cgroup_headroom_bytes),
        "headroom_gb": gb(ram.headroom_bytes),
        "total_bytes": ram.total_bytes,
        "available_bytes": ram.available_bytes,
        "server_held_bytes": held,
        "cgroup_limit_bytes": ram.cgroup_limit_bytes,
        "cgroup_headroom_bytes": ram.cgroup_headroom_bytes,
        "headroom_bytes": ram.headroom_bytes,
    }


def _gpus(facts: GpuFacts) -> dict[str, Any]:
    return {
        "available": facts.available,
        "reason": facts.reason,
        "devices": [
            {
                "index": gpu.index,
                "name": gpu.name,
                "memory_total_gb": gb(gpu.memory_total_bytes),
                "memory_used_gb": gb(gpu.memory_used_bytes),
                "memory_total_bytes": gpu.memory_total_bytes,
                "memory_used_bytes": gpu.memory_used_bytes,
                "processes": [
                    {
                        "pid": process.pid,
                        "name": process.name,
                        "used_gb": gb(process.used_bytes),
                        "used_bytes": process.used_bytes,
                    }
                    for process in gpu.processes
                ],
            }
            for gpu in facts.gpus
        ],
    }
