"""Wait, after a stop, until no compute process holds the server's GPUs and no stray SGLang
process is alive.

Killed SGLang servers can leave ``sglang::scheduler_TP*`` children behind, and the kernel releases
pinned memory only during reclaim (docs/sglang.md, host pool): starting again too early fails with
"The memory capacity is unbalanced". So the agent polls NVML and the process table until both are
clear, and otherwise gives up naming every PID still in the way. Without NVML (no library or
driver) only the process table is watched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bot.agent.host.probe import GpuFacts, GpuProcess, HostProbe, ProcessInfo
from bot.clock import Clock
from bot.errors import GpusBusyError

__all__ = ["WaitResult", "gpu_indices", "wait_for_gpus_free"]


@dataclass(frozen=True)
class WaitResult:
    """How the wait ended: seconds waited, polls made, and a note when the GPUs could not be
    watched (no GPU facts on this host)."""

    waited_s: float
    polls: int
    note: str | None = None


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
    ``exclude_pids`` and no stray SGLang process lives, at most ``timeout_s``; raise
    GpusBusyError naming what is still there otherwise.

    With no GPU facts (no NVML library or driver) only stray processes are waited on, and the
    result says so.
    """
    indices = None if gpu_indices is None else frozenset(gpu_indices)
    exclude = frozenset(exclude_pids)
    start = clock.monotonic()
    polls = 0
    while True:
        facts = probe.gpus()
        strays = probe.stray_server_processes(exclude)
        polls += 1
        waited = clock.monotonic() - start
        holders = _holders(facts, indices, exclude) if facts.available else []
        if not holders and not strays:
            note = None
            if not facts.available:
                note = f"no GPU facts ({facts.reason}); checked for stray SGLang processes only"
            return WaitResult(waited, polls, note=note)
        if waited >= timeout_s:
            raise _busy_error(holders, strays, waited)
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
    parts += [
        f"PID {s.pid} ({s.name}), a stray SGLang process" for s in strays if s.pid not in by_pid
    ]
    message = (
        f"GPUs still busy after {waited:.0f} s: "
        + "; ".join(parts)
        + ". Stop those processes (kill PID), then try again."
    )
    processes = [
        {"pid": pid, "name": name, "gpus": gpus, "used_bytes": used}
        for pid, (name, gpus, used) in sorted(by_pid.items())
    ] + [
        {"pid": s.pid, "name": s.name, "gpus": [], "used_bytes": 0}
        for s in strays
        if s.pid not in by_pid
    ]
    return GpusBusyError(message, processes)


def gpu_indices(ranks: int, env: Mapping[str, str]) -> list[int]:
    """The GPUs the server uses: ``CUDA_VISIBLE_DEVICES`` from its environment, else 0..ranks-1."""
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        parts = [p.strip() for p in visible.split(",")]
        if all(p.isdigit() for p in parts):
            return [int(p) for p in parts][:ranks]
    return list(range(ranks))
