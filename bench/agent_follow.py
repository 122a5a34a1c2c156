"""How promptly the agent sees a start become ready, and what following a busy log costs it.

Prints ONE JSON line:

- ``ready_latency_ms``: the time from the simulator's ``The server is fired up and ready to
  roll!`` line appearing in the log file (a tailer polls the file every 2 ms) to the ``at`` of the
  agent's ``ready`` event; median (and p90, max) over N restarts of the small profile through the
  process backend, with ``poll_interval_s`` as configured below.
- ``follow_*``: the agent process's RSS and CPU while its operation runner follows a log growing
  at 5 MB/s (a separate writer process appends startup lines, then per-request batch and access
  lines; the server "never" becomes ready), measured over the window.

The agent here is this process (the operation manager composed in it), so its RSS includes the
bench's own few MB: an upper bound. Targets: the writer kept up (>= 4.5 MB/s), CPU <= 5% of a
core, peak RSS < 120 MB, and RSS at the end of the window less than 5 MB above its start
(flat; ``follow_rss_growth_mb`` is the peak's rise, which includes the read buffers' churn).
``--quick`` runs 5 restarts and a 5-second follow; by default 20 restarts and a 60-second follow.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
from _ports import free_port
from _report import BenchLine

from bot.agent.config import AgentSettings, agent_settings_from_config
from bot.agent.control.protocol import ServerProcessState, StopResult
from bot.agent.engine.manager import OperationManager
from bot.agent.facts.snapshot import FactsService
from bot.agent.host.probe import GpuFacts, ProcessInfo, RamFacts, ServerCgroup
from bot.agent.service import make_control, make_probe
from bot.agent.sglang_client import SGLangClient
from bot.agent.state.agent_state import AgentState
from bot.clock import SystemClock
from bot.planner import GB, ChangeRequest, DevicePool, HostMemory, Plan, ServerFacts, make_plan
from bot.vocab import OperationKind, ServerState

READY_LINE = "The server is fired up and ready to roll!"
POLL_S = 0.25
RATE_MB_S = 5.0  # the log rate the targets are set at
CPU_PERCENT = 5.0  # targets: at most 5% of a core, RSS under 120 MB (1e6 bytes), and flat:
RSS_MB = 120.0
FLAT_MB = 5.0  # what "flat" allows: the end of the window no more than 5 MB above its start


def _settings(tmp: Path, command: list[str], env: dict[str, str], **extra: Any) -> AgentSettings:
    section = {
        "backend": "process",
        "command": command,
        "server_url": "http://127.0.0.1:1",
        "state_dir": str(tmp / "agent"),
        "log_file": str(tmp / "server.log"),
        "probe": "host",
        "headroom_gb": 0,
        "poll_interval_s": POLL_S,
        "gpu_free_timeout_s": 10,
        "env": env,
        **extra,
    }
    return agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "bench"})


# -- (a) ready latency ------------------------------------------------------------------------


class _Tailer(threading.Thread):
    """Notes the wall time each ready line appears in the log file."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.seen: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        offset, tail = 0, ""
        while not self.stop.is_set():
            try:
                with self.path.open("rb") as handle:
                    handle.seek(offset)
                    data = handle.read()
            except FileNotFoundError:
                data = b""
            if data:
                offset += len(data)
                text = tail + data.decode("utf-8", "replace")
                stamp = time.time()
                self.seen.extend(stamp for _ in range(text.count(READY_LINE)))
                tail = text[-len(READY_LINE) :]
            time.sleep(0.002)


def ready_latency(starts: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kimi-bench-") as tmp_text:
        tmp = Path(tmp_text)
        port = free_port()
        command = [sys.executable, "-m", "bot.sim", "--model-path", "/models/m", "--tp", "2",
                   "--port", str(port), "--mem-fraction-static", "0.7",
                   "--enable-hierarchical-cache", "--hicache-ratio", "2"]  # fmt: skip
        env = {"KIMI_SIM_PROFILE": "small-2gpu", "KIMI_SIM_TIME_SCALE": "0.01",
               "KIMI_SIM_STATE_DIR": str(tmp / "sim")}  # fmt: skip
        settings = _settings(
            tmp, command, env, server_url=f"http://127.0.0.1:{port}", probe="sim",
            sim_profile="small-2gpu", sim_state_dir=str(tmp / "sim"),
        )  # fmt: skip
        control = make_control(settings)
        state = AgentState(settings.state_dir)
        client = SGLangClient(settings.server_url)
        probe = make_probe(settings)
        clock = SystemClock()
        facts = FactsService(settings, probe, control, client, state, clock)
        manager = OperationManager(settings, control, probe, client, state, clock, facts.plan)
        tailer = _Tailer(settings.log_file)
        tailer.start()
        latencies: list[float] = []
        try:
            control.start("bench:1")
            deadline = time.monotonic() + 60
            while client.health() != 200:
                if time.monotonic() > deadline:
                    raise SystemExit("the simulator did not come up")
                time.sleep(0.05)
            for _ in range(starts):
                before = len(tailer.seen)
                op = manager.submit(OperationKind.RESTART, actor="bench")
                manager.join(op.id, 120)
                events = state.events(op.id)
                if events[-1].phase != "ready":
                    raise SystemExit(f"restart did not end ready: {events[-1].message}")
                time.sleep(0.05)
                line_at = tailer.seen[before]
                event_at = datetime.fromisoformat(events[-1].at).timestamp()
                latencies.append((event_at - line_at) * 1000)
        finally:
            tailer.stop.set()
            manager.close()
            control.stop(10)
            client.close()
            state.close()
    ordered = sorted(latencies)
    return {
        "ready_latency_ms_median": round(statistics.median(ordered), 1),
        "ready_latency_ms_p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "ready_latency_ms_max": round(ordered[-1], 1),
        "ready_starts": len(ordered),
        "poll_interval_s": POLL_S,
    }


# -- (b) following a busy log -----------------------------------------------------------------

_WRITER = r"""
import sys, time
path, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
stamp = "[2026-03-02 09:14:05 TP0] "
start = (
    "[2026-03-02 09:00:00] server_args=ServerArgs(model_path='/m', tp_size=8)\n"
    + "".join(f"[2026-03-02 09:00:01 TP{r}] Init torch distributed begin.\n" for r in range(8))
    + "".join(f"\rLoading safetensors checkpoint shards: {i * 100 // 64:3d}% Completed | {i}/64 "
              "[00:11<00:29,  1.58it/s]\n" for i in range(65))
    + "".join(f"[2026-03-02 09:08:00 TP{r}] KV Cache is allocated. #tokens: 159274, KV size: "
              "10.42 GB\n" for r in range(8))
    + "[2026-03-02 09:08:10 TP0] max_total_num_tokens=159274, chunked_prefill_size=8192\n"
    + "".join(f"[2026-03-02 09:08:11 TP{r}] Allocating 44.77 GB host memory for hierarchical "
              "KV cache.\n" for r in range(8))
    + "INFO:     Started server process [12345]\nINFO:     Application startup complete.\n"
)
lines = []
for i in range(400):
    lines.append(stamp + f"Decode batch, #running-req: 80, #token: {150000 + i}, token usage: "
                 "0.94, cuda graph: True, gen throughput (token/s): 2876.45, #queue-req: 12\n")
    lines.append(stamp + f"Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: {i * 7}, "
                 "token usage: 0.94, #running-req: 80, #queue-req: 12\n")
    lines.append(f'INFO:     127.0.0.1:{40000 + i} - "POST /generate HTTP/1.1" 200 OK\n')
block = "".join(lines).encode()
with open(path, "ab", buffering=0) as out:
    out.write(start.encode())
    began, written = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        due = rate * (time.monotonic() - began) - written
        while due > 0:
            out.write(block)
            written += len(block)
            due -= len(block)
        time.sleep(0.01)
    time.sleep(3600)
"""


class _FileTail:
    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset = path, offset

    def read_new(self) -> str:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read(8 << 20)
        except FileNotFoundError:
            return ""
        self.offset += len(data)
        return data.decode("utf-8", "replace")

    def close(self) -> None:
        return None


class _WriterControl:
    """A server-control stand-in whose "server" is the log writer process (no GPU here)."""

    name = "bench"

    def __init__(self, log_file: Path, rate: float, seconds: float) -> None:
        self.log_file, self.rate, self.seconds = log_file, rate, seconds
        self.argv = ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "8",
                     "--enable-hierarchical-cache", "--hicache-ratio", "4"]  # fmt: skip
        self.child: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None

    def read_command(self) -> list[str]:
        return list(self.argv)

    def write_command(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)

    def previous_command(self) -> list[str] | None:
        return None

    def start(self, marker: str) -> None:
        self.started_at = time.time()
        self.child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(self.log_file), str(self.rate), str(self.seconds)]
        )

    def stop(self, grace_s: float) -> StopResult:
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait(10)
            return StopResult("killed", 0.0, -9)
        return StopResult("not_running", 0.0)

    def kill(self) -> StopResult:
        return self.stop(0.0)

    def status(self) -> ServerProcessState:
        if self.child is not None and self.child.poll() is None:
            return ServerProcessState(ServerState.RUNNING, self.child.pid, None, self.started_at)
        return ServerProcessState(ServerState.STOPPED, None, None, self.started_at)

    def started(self, marker: str) -> bool:
        return self.child is not None

    def open_log(self, since: float | None = None) -> _FileTail:
        return _FileTail(self.log_file, 0)


class _NoGpuProbe:
    """Host facts for the follow bench: no GPU to wait for (this machine has none)."""

    def ram(self, server: ServerCgroup | None = None) -> RamFacts:
        return RamFacts(total_bytes=449 * 10**9, available_bytes=445 * 10**9)

    def gpus(self) -> GpuFacts:
        return GpuFacts(available=False, reason="bench: no GPU")

    def released_by_stop(self, pid: int, ram: RamFacts) -> int:
        return 0

    def stray_server_processes(self, exclude_pids: Any) -> list[ProcessInfo]:
        return []


class _Silent:
    def health(self) -> int | None:
        return None

    def server_info(self) -> dict[str, Any] | None:
        return None


def _planner(request: ChangeRequest) -> tuple[Plan, str]:
    server = ServerFacts(ranks=8, device_pool=DevicePool(tokens=159274, bytes_per_token=70272))
    return make_plan(request, server, HostMemory(available_bytes=445 * GB), 40), "bench"


def follow_cost(seconds: float, rate_mb_s: float = RATE_MB_S) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kimi-bench-") as tmp_text:
        tmp = Path(tmp_text)
        settings = _settings(tmp, ["python", "-m", "sglang.launch_server"], {},
                             stall_after_s=3600, hard_ceiling_s=7200)  # fmt: skip
        control = _WriterControl(settings.log_file, rate_mb_s * 1e6, seconds + 2)
        state = AgentState(settings.state_dir)
        manager = OperationManager(settings, control, _NoGpuProbe(), _Silent(), state,
                                   SystemClock(), _planner)  # fmt: skip
        me = psutil.Process()
        try:
            manager.submit(OperationKind.RESIZE, actor="bench", ratio=4)
            time.sleep(1.0)  # past the stop and the start
            rss_before = me.memory_info().rss
            cpu0, wall0 = me.cpu_times(), time.monotonic()
            size0 = settings.log_file.stat().st_size
            peak = rss_before
            while time.monotonic() - wall0 < seconds:
                time.sleep(0.2)
                peak = max(peak, me.memory_info().rss)
            cpu1, wall1 = me.cpu_times(), time.monotonic()
            rss_after = me.memory_info().rss
            grown = settings.log_file.stat().st_size - size0
        finally:
            manager.close()
            control.stop(1)
            state.close()
    busy = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "follow_seconds": round(wall1 - wall0, 1),
        "follow_log_mb_per_s": round(grown / 1e6 / (wall1 - wall0), 2),
        "follow_cpu_percent": round(100 * busy / (wall1 - wall0), 1),
        "follow_rss_mb": round(peak / 1e6, 1),
        "follow_rss_start_mb": round(rss_before / 1e6, 1),
        "follow_rss_end_mb": round(rss_after / 1e6, 1),
        "follow_rss_growth_mb": round((peak - rss_before) / 1e6, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 restarts and a 5 s follow")
    args = parser.parse_args(argv)
    os.environ.pop("KIMI_SIM_FAIL", None)
    line = BenchLine("agent_follow")
    line.figures.update(ready_latency(5 if args.quick else 20))
    follow = follow_cost(5.0 if args.quick else 60.0)
    line.figures.update(follow)
    line.check("log actually written during the follow", follow["follow_log_mb_per_s"],
               at_least=0.9 * RATE_MB_S, unit="MB/s")  # fmt: skip
    line.check("agent CPU following 5 MB/s of log", follow["follow_cpu_percent"],
               at_most=CPU_PERCENT, unit="% of a core")  # fmt: skip
    line.check("agent RSS (peak) following 5 MB/s of log", follow["follow_rss_mb"],
               below=RSS_MB, unit="MB")  # fmt: skip
    line.check("agent RSS at the end minus at the start (flat)",
               follow["follow_rss_end_mb"] - follow["follow_rss_start_mb"], below=FLAT_MB,
               unit="MB")  # fmt: skip
    line.emit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
