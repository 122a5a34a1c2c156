"""Wait, after a stop, until no compute process holds the server's GPUs.

Killed SGLang servers can leave ``sglang::scheduler_TP*`` children behind, and the kernel releases
pinned memory only during reclaim (SGLANG_FACTS.md section 5): starting again too early fails with
"The memory capacity is unbalanced". So the agent polls NVML until the GPUs show no compute
process, and otherwise gives up naming every PID still holding them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bot.agent.probe import GpuFacts, GpuProcess, HostProbe, ProcessInfo
from bot.clock import Clock
from bot.errors import GpusBusyError

__all__ = ["WaitResult", "wait_for_gpus_free"]


@dataclass(frozen=True)
class WaitResult:
    """How the wait ended: seconds waited, polls made, and a note when there was nothing to
    watch (no GPU facts on this host). ``strays`` lists sglang processes outside the server that
    were alive at the end (they hold no GPU then, but hold host RAM)."""

    waited_s: float
    polls: int
    note: str | None = None
    strays: tuple[ProcessInfo, ...] = ()


def _holders(
    facts: GpuFacts, gpu_indices: frozenset[int] | None, exclude: frozenset[int]
) -> list[tuple[int, GpuProcess]]:
    return [
        (gpu.index, process)
        for gpu in facts.gpus
        if gpu_indices is None or gpu.index in gpu_indices
        for process in gpu.processes
        if process.pid not in exclude
    ]


def wait_for_gpus_free(
    probe: HostProbe,
    clock: Clock,
    gpu_indices: Iterable[int] | None,
    exclude_pids: Iterable[int],
    timeout_s: float,
    poll_s: float,
) -> WaitResult:
    """Poll until the GPUs (``gpu_indices``; None = all) hold no compute process outside
    ``exclude_pids``, at most ``timeout_s``; raise GpusBusyError naming the holders otherwise.

    With no GPU facts (no NVML library or driver) it returns at once with a note.
    """
    indices = None if gpu_indices is None else frozenset(gpu_indices)
    exclude = frozenset(exclude_pids)
    start = clock.monotonic()
    polls = 0
    while True:
        facts = probe.gpus()
        polls += 1
        waited = clock.monotonic() - start
        if not facts.available:
            return WaitResult(
                waited, polls, note=f"no GPU facts ({facts.reason}); nothing to wait on"
            )
        holders = _holders(facts, indices, exclude)
        if not holders:
            strays = tuple(probe.stray_server_processes(exclude))
            return WaitResult(waited, polls, strays=strays)
        if waited >= timeout_s:
            raise _busy_error(holders, probe.stray_server_processes(exclude), waited)
        clock.sleep(min(poll_s, max(timeout_s - waited, 0.0)))


def _busy_error(
    holders: list[tuple[int, GpuProcess]], strays: list[ProcessInfo], waited: float
) -> GpusBusyError:
    by_pid: dict[int, tuple[str, list[int], int]] = {}
    for index, process in holders:
        name, gpus, used = by_pid.get(process.pid, (process.name, [], 0))
        by_pid[process.pid] = (name, [*gpus, index], used + process.used_bytes)
    parts = [
        f"PID {pid} ({name}) on GPU {','.join(map(str, gpus))} holding {used / 1e9:.1f} GB"
        for pid, (name, gpus, used) in sorted(by_pid.items())
    ]
    stray_parts = [f"PID {s.pid} ({s.name})" for s in strays if s.pid not in by_pid]
    message = f"GPUs still busy after {waited:.0f} s: " + "; ".join(parts)
    if stray_parts:
        message += "; stray SGLang processes: " + ", ".join(stray_parts)
    message += ". Stop those processes (kill PID), then try again."
    processes = [
        {"pid": pid, "name": name, "gpus": gpus, "used_bytes": used}
        for pid, (name, gpus, used) in sorted(by_pid.items())
    ] + [
        {"pid": s.pid, "name": s.name, "gpus": [], "used_bytes": 0}
        for s in strays
        if s.pid not in by_pid
    ]
    return GpusBusyError(message, processes)
