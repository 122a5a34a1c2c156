"""The simulated host's shared state: which simulated processes hold RAM and GPU memory.

One small JSON file per state directory (``host-state.json``), rewritten atomically under an
``flock`` so several simulators (and strays) on one simulated host see each other. A record
whose process is gone (SIGKILL included: checked by pid, start time and zombie status) keeps
its GPU memory "held" on the GPUs that were pinning until ``release_after_s`` past its last
heartbeat, as pinned pools are unpinned slowly by the kernel after a kill (docs/sglang.md,
Failure and teardown).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bot.errors import SimError
from bot.sim._profile import HostProfile

__all__ = [
    "HostSnapshot",
    "SimGpu",
    "SimGpuProcess",
    "SimServerRecord",
    "StateStore",
    "process_start_time",
    "read_host_state",
]

STATE_FILE = "host-state.json"
LOCK_FILE = "host-state.lock"


@dataclass(frozen=True)
class SimGpuProcess:
    pid: int
    name: str
    used_bytes: int


@dataclass(frozen=True)
class SimGpu:
    index: int
    name: str
    memory_total_bytes: int
    memory_used_bytes: int
    processes: tuple[SimGpuProcess, ...]


@dataclass(frozen=True)
class SimServerRecord:
    """A live simulated server: the RAM it holds (each page once), and the pages its
    ``processes`` (main, one scheduler per rank, the detokenizer) map in common."""

    pid: int
    host_bytes: int
    started_at: float
    shared_bytes: int = 0
    processes: int = 1

    @property
    def pss_bytes(self) -> int:
        """The tree's proportional set size: shared pages split among their processes, so the
        sum over the tree counts each page once (``/proc/PID/smaps_rollup``'s ``Pss``)."""
        return self.host_bytes

    @property
    def rss_bytes(self) -> int:
        """The sum of the tree's resident set sizes: every process counts the shared pages."""
        return self.host_bytes + self.shared_bytes * (self.processes - 1)


@dataclass(frozen=True)
class HostSnapshot:
    """What psutil and NVML would tell about the simulated host at one moment."""

    ram_total_bytes: int
    ram_available_bytes: int
    gpus: tuple[SimGpu, ...]
    servers: tuple[SimServerRecord, ...]


def process_start_time(pid: int) -> float:
    """The process's start time, which tells a live pid from a reused one."""
    return psutil.Process(pid).create_time()


def _alive(record: dict[str, Any]) -> bool:
    try:
        proc = psutil.Process(int(record["pid"]))
        if abs(proc.create_time() - float(record["pid_start"])) > 0.01:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False


class StateStore:
    """Read-modify-write access to one state directory, under a file lock."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            lock = open(self.state_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held across the yield
        except OSError as exc:
            raise SimError(
                f"state directory {str(self.state_dir)!r} is not writable ({exc}); "
                "set KIMI_SIM_STATE_DIR to a writable folder"
            ) from exc
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._load()
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                self._save(data)

    def _load(self) -> dict[str, Any]:
        path = self.state_dir / STATE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"records": {}}
        except (OSError, ValueError):
            # A torn or foreign file: start over rather than wedge every simulator.
            return {"records": {}}
        if not isinstance(data, dict) or not isinstance(data.get("records"), dict):
            return {"records": {}}
        return data

    def _save(self, data: dict[str, Any]) -> None:
        path = self.state_dir / STATE_FILE
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)

    def put(self, record: dict[str, Any]) -> None:
        """Add or replace the record of ``record['pid']``, stamping its heartbeat."""
        with self._locked() as data:
            record = dict(record, heartbeat_at=time.time())
            data["records"][str(record["pid"])] = record

    def update(self, pid: int, **fields: Any) -> None:
        with self._locked() as data:
            record = data["records"].get(str(pid))
            if record is not None:
                record.update(fields, heartbeat_at=time.time())

    def release(self, pid: int) -> None:
        """A clean exit: the process's RAM and GPU memory are free at once."""
        with self._locked() as data:
            data["records"].pop(str(pid), None)

    def live_view(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every record still holding something, each marked ``alive`` or not; prunes the rest."""
        now = time.time() if now is None else now
        out: list[dict[str, Any]] = []
        with self._locked() as data:
            for key, record in list(data["records"].items()):
                alive = _alive(record)
                held_until = float(record["heartbeat_at"]) + float(record["release_after_s"])
                if not alive and now >= held_until:
                    del data["records"][key]
                    continue
                out.append(dict(record, alive=alive))
        return out


def read_host_state(
    profile: HostProfile, state_dir: Path, now: float | None = None
) -> HostSnapshot:
    """The simulated host as psutil and NVML would report it now.

    RAM available is the profile's figure less what live simulated processes hold; a dead
    simulator's GPU memory shows under its old pid on the GPUs that were still pinning, until
    its release delay has passed.
    """
    records = StateStore(state_dir).live_view(now)
    held_ram = sum(int(r["host_bytes"]) for r in records if r["alive"])
    per_gpu: dict[int, list[SimGpuProcess]] = {i: [] for i in range(profile.gpu_count)}
    for record in records:
        gpu_bytes: dict[str, int] = record.get("gpu_bytes", {})
        leftover_gpus = set(record.get("leftover_gpus", []))
        for index_text, used in gpu_bytes.items():
            index = int(index_text)
            if index not in per_gpu or (not record["alive"] and index not in leftover_gpus):
                continue
            name = str(record["gpu_names"].get(index_text, record["name"]))
            per_gpu[index].append(SimGpuProcess(int(record["pid"]), name, int(used)))
    gpus = tuple(
        SimGpu(
            index=i,
            name=profile.gpu_name,
            memory_total_bytes=profile.gpu_memory_bytes,
            memory_used_bytes=min(profile.gpu_memory_bytes, sum(p.used_bytes for p in procs)),
            processes=tuple(procs),
        )
        for i, procs in sorted(per_gpu.items())
    )
    servers = tuple(
        SimServerRecord(
            int(r["pid"]),
            int(r["host_bytes"]),
            float(r["started_at"]),
            shared_bytes=int(r.get("shared_bytes", 0)),
            processes=int(r.get("processes", 1)),
        )
        for r in records
        if r["alive"] and r.get("kind") == "server"
    )
    return HostSnapshot(
        ram_total_bytes=profile.ram_total_bytes,
        ram_available_bytes=max(0, profile.ram_available_bytes - held_ram),
        gpus=gpus,
        servers=servers,
    )
