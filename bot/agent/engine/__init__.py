"""The operation engine: resizes, restarts and rollbacks, one at a time, resumable after a crash.

- :mod:`bot.agent.engine.manager`: requests (checks, planning, records) and the threads;
- :mod:`bot.agent.engine.runner`: one operation's sequence: start, record, roll back to the last
  ready revision, resume;
- :mod:`bot.agent.engine.start_attempt`: one start: write the command line, stop, GPU wait,
  spawn or adopt, follow under the guard;
- :mod:`bot.agent.engine.position`: where an operation stands (its resume point) and the crash
  points passed between its steps;
- :mod:`bot.agent.engine.follower`: following one start to ready or failed (stall, ceiling);
- :mod:`bot.agent.engine.watcher`: a start's log turned into events and figures (pure);
- :mod:`bot.agent.engine.guard`: a start stopped when its host pools exceed the plan's budget or
  host RAM falls below the floor;
- :mod:`bot.agent.engine.memory_watch`: after ready, the headroom's crossings of the guard's
  floor, one per fall (pure);
- :mod:`bot.agent.engine.post_ready`: the thread that samples a serving server's headroom and
  keeps the notices;
- :mod:`bot.agent.engine.progress`: progress 0..1 and the ETA (pure);
- :mod:`bot.agent.engine.gpu_wait`: waiting for the server's GPUs to free;
- :mod:`bot.agent.engine.served_setting`: does ``/server_info`` show what was applied (pure);
- :mod:`bot.agent.engine.event_log`: the operation's events, each step once;
- :mod:`bot.agent.engine.context`: what the parts share;
- :mod:`bot.agent.engine.crash_points`: where a crash test kills the engine.
"""

from __future__ import annotations

from bot.agent.engine.context import RunnerContext, SGLangLike, StartOutcome
from bot.agent.engine.crash_points import (
    APPLY_POINTS,
    NO_CRASHES,
    ROLLBACK_POINTS,
    CrashAt,
    CrashPoint,
    CrashPoints,
    SimulatedCrash,
)
from bot.agent.engine.gpu_wait import WaitResult, gpu_indices, wait_for_gpus_free
from bot.agent.engine.guard import GuardTrip, PoolBudget, StartGuard, guard_note
from bot.agent.engine.manager import OperationManager, Planner
from bot.agent.engine.memory_watch import HeadroomCrossings, HeadroomSample, MemoryCrossing
from bot.agent.engine.position import OperationPosition
from bot.agent.engine.post_ready import MemoryNotice, MemoryNoticeLog, PostReadyWatch
from bot.agent.engine.runner import Runner
from bot.agent.engine.start_attempt import StartAttempt

__all__ = [
    "APPLY_POINTS",
    "NO_CRASHES",
    "ROLLBACK_POINTS",
    "CrashAt",
    "CrashPoint",
    "CrashPoints",
    "GuardTrip",
    "HeadroomCrossings",
    "HeadroomSample",
    "MemoryCrossing",
    "MemoryNotice",
    "MemoryNoticeLog",
    "OperationManager",
    "OperationPosition",
    "Planner",
    "PoolBudget",
    "PostReadyWatch",
    "Runner",
    "RunnerContext",
    "SGLangLike",
    "SimulatedCrash",
    "StartAttempt",
    "StartGuard",
    "StartOutcome",
    "WaitResult",
    "gpu_indices",
    "guard_note",
    "wait_for_gpus_free",
]
