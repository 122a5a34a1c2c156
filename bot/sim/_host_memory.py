"""The host pool: SGLang's size check against the host's RAM, then the pin and the OOM killer."""

from __future__ import annotations

from typing import NoReturn

from bot.sim import _lines
from bot.sim._simulation import Simulation
from bot.sim._sizing import RESERVE_BYTES, HostPool
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
        budget = (available - RESERVE_BYTES) // len(sim.ranks)
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
    _pin(sim, pinned * len(sim.ranks), pinned / 1e9 / sim.p.pin_gb_per_s)


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
        if others + sim.host_bytes > sim.p.ram_available_bytes:
            _oom_killed(sim)


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
