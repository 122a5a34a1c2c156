"""Does a capacity report over 20 hosts take about as long as over one?

Starts --hosts (default 20) agent stand-ins on 127.0.0.1 port 0, each answering ``GET
/v1/status`` after --latency-s (default 1.0: the agent reads psutil and NVML, about 1 s) and
``GET /v1/operations`` at once, then times :func:`collect_reports` over one host and over all,
through the bot's real AgentClient. Stand-ins, not agents: on one machine 20 agents would
compete for its cores, which 20 GPU hosts do not; what is measured is the bot asking in parallel.
Prints one JSON line:

    {"bench": "reports_parallel", "hosts": 20, "latency_s": 1.0, "one_host_s": ...,
     "all_hosts_s": ..., "targets": [{"figure": ..., "target": "<= 2 x", ...}], ...}

Target: all hosts within 2x of one. ``--quick``: 5 hosts answering in 0.3 s.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from _agent_stand_in import agent_stand_in
from _report import BenchLine

from bot.chat.agent_client import AgentClient
from bot.clock import SystemClock
from bot.reports.runtime import ServerMetricsSource, collect_reports
from bot.settings import Secret

TOKEN = "bench-t0ken"
TARGET_RATIO = 2.0  # the fan-out target: many hosts within 2x of one


def _status(name: str) -> dict[str, Any]:
    return {
        "host": {"name": name},
        "server": {"state": "running", "health_code": 200, "version": "0.5.9", "uptime_s": 60.0},
        "config": {"enable_hierarchical_cache": True, "hicache_ratio": 2.0,
                   "effective": "ratio 2 x device pool"},
        "capacity": {"device_tokens": 159274, "host_tokens_per_rank": 318549,
                     "host_gb_per_rank": 22.39, "ranks": 8},
        "ram": {"total_gb": 449.0, "available_gb": 237.9},
        "gpus": {"devices": []},
    }  # fmt: skip


def _stand_in(name: str, latency_s: float) -> AbstractContextManager[str]:
    answers = {
        "/v1/status": json.dumps(_status(name)).encode(),
        "/v1/operations": json.dumps({"operations": []}).encode(),
    }
    return agent_stand_in(answers, {"/v1/status": latency_s})


def _time(names: list[str], clients: dict[str, AgentClient]) -> float:
    source = ServerMetricsSource({})
    started = time.perf_counter()
    reports = collect_reports(names, clients, source, SystemClock())
    elapsed = time.perf_counter() - started
    assert all(r.answered for r in reports), [r.problem for r in reports if not r.answered]
    source.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--latency-s", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="5 hosts answering in 0.3 s")
    args = parser.parse_args()
    if args.quick:
        args.hosts, args.latency_s = 5, 0.3
    if args.hosts < 1 or args.latency_s < 0:
        parser.error("--hosts must be at least 1 and --latency-s not negative")
    names = [f"kimi-{n:02d}" for n in range(1, args.hosts + 1)]
    with contextlib_stack(names, args.latency_s) as urls:
        clients = {n: AgentClient(urls[n], Secret(TOKEN), host=n) for n in names}
        try:
            one = _time(names[:1], clients)
            everyone = _time(names, clients)
        finally:
            for client in clients.values():
                client.close()
    line = BenchLine("reports_parallel")
    line.figures.update(hosts=args.hosts, latency_s=args.latency_s, one_host_s=round(one, 3),
                        all_hosts_s=round(everyone, 3))  # fmt: skip
    line.check(f"report gathering, {args.hosts} slow hosts / 1", everyone / one,
               at_most=TARGET_RATIO, unit="x")  # fmt: skip
    line.emit()


@contextmanager
def contextlib_stack(names: list[str], latency_s: float) -> Iterator[dict[str, str]]:
    import contextlib

    with contextlib.ExitStack() as stack:
        yield {n: stack.enter_context(_stand_in(n, latency_s)) for n in names}


if __name__ == "__main__":
    main()
