"""How fast the startup guard stops a start whose host pool is over budget.

The agent is composed by its own root (``build_service``) in this process, on the process
backend with the simulator as the server (small-2gpu profile, time scale 0.01, the agent's
default ``poll_interval_s`` and guard settings). Each run asks for ratio 3 (31.6 GB planned
within the 49.3 GB budget) while the simulator allocates twice that (``host_pool_x:2``, pinned
slowly): the guard must kill the start on its first ``Allocating ... GB host memory`` line and
roll back. A tailer polls the server's log every 2 ms; when the line appears it notes the wall
time and the server's process tree (this process's children), then polls every 2 ms until every
process of that tree has exited. Prints ONE JSON line with the median and max over ``--runs``
runs (10; 2 with ``--quick``) against the 1 s target.

    .venv/bin/python bench/guard.py [--runs N] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from _ports import free_port
from _report import BenchLine, median

from bot.agent.config import agent_settings_from_config
from bot.agent.service import AgentService, build_service
from bot.vocab import FailureKind, OperationKind, OperationState

ALLOCATING = b"GB host memory for hierarchical KV cache"
TARGET_MS = 1000.0


class TreeWatch(threading.Thread):
    """From ``offset`` in ``log``: the time the Allocating line appears, and the time the
    process tree alive at that moment is gone (zombies count as gone: they hold no memory)."""

    def __init__(self, log: Path, offset: int) -> None:
        super().__init__(daemon=True)
        self.log, self.offset = log, offset
        self.line_at: float | None = None
        self.gone_at: float | None = None
        self.tree_size = 0
        self.stop = threading.Event()

    def run(self) -> None:
        seen = b""
        while not self.stop.is_set() and self.line_at is None:
            with contextlib.suppress(FileNotFoundError), self.log.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
                self.offset += len(chunk)
                seen = (seen + chunk)[-4096:]
            if ALLOCATING in seen:
                self.line_at = time.monotonic()
                tree = psutil.Process().children(recursive=True)
                self.tree_size = len(tree)
                self._wait_gone(tree)
                return
            time.sleep(0.002)

    def _wait_gone(self, tree: list[psutil.Process]) -> None:
        while not self.stop.is_set():
            if not any(_alive(p) for p in tree):
                self.gone_at = time.monotonic()
                return
            time.sleep(0.002)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _service(tmp: Path) -> AgentService:
    port = free_port()
    command = [sys.executable, "-m", "bot.sim", "--model-path", "/models/m", "--tp", "2",
               "--port", str(port), "--mem-fraction-static", "0.7"]  # fmt: skip
    env = {"KIMI_SIM_PROFILE": "small-2gpu", "KIMI_SIM_TIME_SCALE": "0.01",
           "KIMI_SIM_STATE_DIR": str(tmp / "sim"),
           "KIMI_SIM_FAIL": "host_pool_x:2,slow_pin:10"}  # fmt: skip
    section = {
        "backend": "process", "command": command, "server_url": f"http://127.0.0.1:{port}",
        "state_dir": str(tmp / "agent"), "log_file": str(tmp / "server.log"), "probe": "sim",
        "sim_profile": "small-2gpu", "sim_state_dir": str(tmp / "sim"), "headroom_gb": 0,
        "gpu_free_timeout_s": 10, "env": env,
    }  # fmt: skip
    settings = agent_settings_from_config({"agent": section}, {"KIMI_AGENT_TOKEN": "bench"})
    return build_service(settings)


def _start_first_server(service: AgentService) -> None:
    service.control.start("bench:1")
    deadline = time.monotonic() + 60
    while service.sglang.health() != 200:
        if time.monotonic() > deadline or not service.control.status().running:
            raise SystemExit("the simulator did not become healthy within 60 s")
        time.sleep(0.05)


def one_run(service: AgentService) -> tuple[float, int]:
    """One guarded start: (Allocating line -> tree gone in ms, processes in the tree)."""
    log = service.settings.log_file
    watch = TreeWatch(log, log.stat().st_size if log.exists() else 0)
    watch.start()
    try:
        op = service.submit(OperationKind.RESIZE, actor="bench", ratio=3)
        if not service.manager.join(op.id, 120):
            raise SystemExit(f"operation {op.id} did not end within 120 s")
        final = service.get(op.id)
        failure = final.failure or {}
        if final.state != OperationState.ROLLED_BACK or failure.get("kind") != (
            FailureKind.HOST_POOL_OVER_BUDGET
        ):
            raise SystemExit(f"the guard did not stop the start: {final.state}, {failure}")
        watch.join(30)
    finally:
        watch.stop.set()
    if watch.line_at is None or watch.gone_at is None:
        raise SystemExit("the Allocating line or the end of the server's tree was not seen")
    return (watch.gone_at - watch.line_at) * 1000, watch.tree_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="2 runs")
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    if runs < 1:
        parser.error(f"--runs {runs} is not positive; give 1 or more")
    line = BenchLine("guard")
    with tempfile.TemporaryDirectory(prefix="kimi-ops-guard-bench-") as tmp:
        service = _service(Path(tmp))
        try:
            _start_first_server(service)
            results = [one_run(service) for _ in range(runs)]
        finally:
            service.close()
            service.control.stop(10)
    took = [ms for ms, _ in results]
    line.figures.update(
        runs=runs,
        poll_interval_s=service.settings.poll_interval_s,
        tree_processes=max(size for _, size in results),
        line_to_tree_gone_ms={"median": round(median(took), 1), "max": round(max(took), 1)},
    )
    line.check("Allocating line -> server tree gone, median", median(took), below=TARGET_MS,
               unit="ms")  # fmt: skip
    line.emit()


if __name__ == "__main__":
    main()
