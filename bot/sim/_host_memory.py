"""The host pool: SGLang's size check against the host's RAM, then the pin and the OOM killer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

from bot.sim import _lines
from bot.sim._simulation import Simulation
from bot.sim._sizing import (
    GIB,
    RESERVE_BYTES,
    HostPool,
    auto_size,
    headroom,
    mooncake_segment_bytes,
)
from bot.sim._state import read_host_state
from bot.sim._tracebacks import main_traceback, scheduler_traceback

# The pin's progress is recorded in this many steps: the shared state shows RAM falling.
_PIN_STEPS = 20

__all__ = ["host_pool_phase"]


def host_pool_phase(sim: Simulation, pool: HostPool) -> None:
    """Size check, ``Allocating ...`` on every rank, then the silent pin (and 0.5.9's OOM)."""
    sim.sleep(sim.p.phase("host_pool"))
    new = sim.s.new_dialect
    if sim.s.version_tuple <= (0, 5, 12) and pool.tokens <= sim.device_tokens:
        sim.die(sim.ranks[0], "host_assert", f"AssertionError: {_lines.HOST_SMALLER}")
    others = sum(
        s.host_bytes for s in read_host_state(sim.p, sim.s.state_dir).servers if s.pid != sim.pid
    )
    available = sim.p.ram_available_bytes - others - sim.host_bytes
    if sim.s.version_tuple >= (0, 5, 20):
        available = _headroom(sim, available)
        budget = (available - RESERVE_BYTES) // len(sim.ranks)
        if sim.auto_size:
            pool, budget = _auto_size(sim, available)
    else:
        budget = available - RESERVE_BYTES
    if pool.bytes > budget:
        message = _lines.host_memory_error(pool.gb, budget / 1e9)
        failing = sim.rng.sample(sim.ranks, len(sim.ranks))
        for rank in failing:
            text = scheduler_traceback("host_pool", f"ValueError: {message}")
            sim.log.line(f"Scheduler hit an exception: {text}", rank.prefix)
        sim.log.line(_lines.SIGQUIT)
        sim.kill_tree(release=True)
    sim.each_rank(lambda r: _lines.allocating_host(new, pool.tokens, pool.gb))
    pinned = pool.bytes
    for name, per_token in sim.p.host_extra_pools:
        # A DSA indexer holds the KV host pool's tokens: allocated after it, RAM all the same.
        extra = pool.tokens * per_token
        if extra > budget - pool.bytes:
            message = _lines.host_extra_error(name, extra / 1e9, (budget - pool.bytes) / 1e9)
            text = scheduler_traceback("host_pool", f"ValueError: {message}")
            sim.log.line(f"Scheduler hit an exception: {text}", sim.ranks[0].prefix)
            sim.log.line(_lines.SIGQUIT)
            sim.kill_tree(release=True)
        line = _lines.allocating_host_extra(name, extra / 1e9)
        sim.each_line(line)
        pinned += extra
    segment = _mooncake_segment(sim)
    if segment:
        # The store's segment is host RAM outside SGLang's budget check, registered per rank.
        given = getattr(sim.args, "hicache_storage_backend_extra_config", None)
        sim.each_line(_lines.mooncake_config_loaded("extra_config" if given else "env"))
        sim.each_line(_lines.MOONCAKE_SETUP)
    pinned += segment
    _pin(sim, pinned * len(sim.ranks), pinned / 1e9 / sim.p.pin_gb_per_s)


def _mooncake_segment(sim: Simulation) -> int:
    """Bytes of Mooncake's global segment one rank registers: ``global_segment_size`` (from
    ``--hicache-storage-backend-extra-config``, JSON or ``@file``; default 4 GiB) divided by
    TP x PP (``srt/mem_cache/storage/mooncake_store/mooncake_store.py``); 0 for another backend."""
    if sim.args.hicache_storage_backend != "mooncake":
        return 0
    text = getattr(sim.args, "hicache_storage_backend_extra_config", None)
    config: dict[str, object] = {}
    if text:
        raw = Path(text[1:]).read_text(encoding="utf-8") if text.startswith("@") else text
        loaded = json.loads(raw)
        if isinstance(loaded, dict):
            config = loaded
    size = mooncake_segment_bytes(config.get("global_segment_size", "4gb"))
    return size // int(sim.args.tp_size * sim.args.pp_size)


def _headroom(sim: Simulation, host_available: int) -> int:
    """0.5.23's allocatable RAM: in a memory cgroup, the least of host and cgroup room, both
    logged by every rank. The server is alone in its cgroup: its usage is its own RAM."""
    limit = sim.p.cgroup_limit_bytes
    if limit is None:
        return host_available
    room = headroom(host_available, limit, sim.host_bytes)
    cgroup_room = max(0, limit - sim.host_bytes)
    sim.each_rank(lambda r: _lines.memory_headroom(host_available, cgroup_room))
    return room


def _auto_size(sim: Simulation, available: int) -> tuple[HostPool, int]:
    """Neither ratio nor size given: the ratio lowered until the pools fit the budget (logged by
    every rank), the pool at that ratio, and the budget it is checked against."""
    sized = auto_size(
        sim.ratio or 2.0,
        float(sim.args.hicache_host_memory_fraction),
        available,
        len(sim.ranks),
        sim.device_pool_bytes,
    )
    if sized.ratio <= 0:
        sim.die(sim.ranks[0], "host_pool", f"ValueError: {_lines.AUTO_SIZING_NOTHING_LEFT}")
    sim.each_rank(
        lambda r: _lines.auto_sizing(
            sized.requested,
            sized.ratio,
            sized.budget_bytes / GIB,
            sized.fraction,
            sized.ranks,
            sized.pools_gib,
        )
    )
    sim.ratio = sized.ratio
    pool = sim.host_pool_at(sized.ratio)
    sim.pool = pool
    sim.load.host_tokens = pool.tokens
    return pool, sized.budget_bytes


def _pin(sim: Simulation, total_bytes: int, pin_s: float) -> None:
    """The ranks pin at once, so the host's RAM falls in step with the pin (recorded in
    ``_PIN_STEPS`` steps); when it runs out, the kernel OOM killer strikes."""
    pin_s *= sim.s.failures.slow_pin
    base = sim.host_bytes
    for step in range(1, _PIN_STEPS + 1):
        sim.sleep(pin_s / _PIN_STEPS)
        sim.host_bytes = base + total_bytes * step // _PIN_STEPS
        sim.store.update(sim.pid, host_bytes=sim.host_bytes)
        others = sum(
            s.host_bytes
            for s in read_host_state(sim.p, sim.s.state_dir).servers
            if s.pid != sim.pid
        )
        limit = sim.p.cgroup_limit_bytes
        if others + sim.host_bytes > sim.p.ram_available_bytes or (
            limit is not None and sim.host_bytes > limit
        ):
            _oom_killed(sim)  # the host's OOM killer, or the cgroup's


def _oom_killed(sim: Simulation) -> NoReturn:
    victim = sim.ranks[-1]
    if sim.s.version_tuple >= (0, 5, 10):
        frames = [
            (
                "sglang/srt/entrypoints/engine.py",
                1277,
                "_wait_for_scheduler_ready",
                "raise _scheduler_died_error(i, scheduler_procs[i])",
            )
        ]
        sim.log.err(
            main_traceback(
                frames, "RuntimeError: " + _lines.scheduler_died(sim.ranks.index(victim), -9)
            )
        )
    # 0.5.9 says nothing: the OOM kill is silent and the tree goes down with it. The pinned
    # pools are unpinned slowly, so the GPUs stay held for a while (release=False).
    sim.kill_tree(release=False)
