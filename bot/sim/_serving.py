"""Serving: the HTTP front opens, warmup's request, the steady load, and SIGTERM's drain."""

from __future__ import annotations

import os
import signal
import time
import urllib.request

from bot.sim import _lines
from bot.sim._http import HttpFront, ServerView
from bot.sim._simulation import Simulation, Terminated

__all__ = ["open_http", "serve", "terminate", "warm_up"]


def open_http(sim: Simulation) -> None:
    args = sim.args
    sim.view = ServerView(
        server_info=sim.server_info(),
        ready_endpoint=sim.s.version_tuple >= (0, 5, 20),
        metrics_enabled=args.enable_metrics,
        metrics=lambda: sim.load.metrics(
            sim.s.version_tuple >= (0, 5, 10) and sim.pool is not None
        ),
        health_flap=sim.s.failures.health_flap,
        on_generate=lambda: sim.rank0(sim.load.warmup()),
    )
    try:
        sim.http = HttpFront(args.host, args.port, sim.view, sim.log)
    except OSError as exc:
        reason = (exc.strerror or "address already in use").lower()
        sim.log.line(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{args.host}', {args.port}): {reason}"
        )
        sim.kill_tree(release=True)
    sim.http.start()
    sim.log.line(f"INFO:     Started server process [{sim.pid}]")
    sim.log.line("INFO:     Waiting for application startup.")
    sim.log.line("INFO:     Application startup complete.")
    sim.log.line(
        f"INFO:     Uvicorn running on http://{args.host}:{sim.http.port} (Press CTRL+C to quit)"
    )
    sim.sleep(sim.p.phase("http"))


def warm_up(sim: Simulation) -> None:
    assert sim.http is not None
    assert sim.view is not None
    host = "127.0.0.1" if sim.args.host in ("0.0.0.0", "") else sim.args.host
    base = f"http://{host}:{sim.http.port}"
    with urllib.request.urlopen(f"{base}/model_info", timeout=10) as reply:
        reply.read()
    sim.sleep(sim.p.phase("warmup"))
    request = urllib.request.Request(
        f"{base}/generate", data=b'{"text":"The capital city of France is"}', method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        reply.read()
    sim.view.status = "ready"
    sim.log.line(_lines.READY)


def serve(sim: Simulation) -> None:
    rate = sim.s.load_rate
    tick = max(0.05, sim.s.seconds(1.0)) if rate else 0.25
    while True:
        if sim.stop.wait(tick):
            raise Terminated
        if rate:
            arrivals = sum(1 for _ in range(int(rate * 4)) if sim.rng.random() < 0.25)
            for message in sim.load.tick(arrivals, tick):
                sim.rank0(message)


def terminate(sim: Simulation) -> int:
    """SIGTERM: before HTTP, die as Python does; after, drain with /health 503, exit 0."""
    if sim.http is None or sim.view is None:
        sim.store.release(sim.pid)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(sim.pid, signal.SIGTERM)
        return 143  # pragma: no cover - the default action ends the process first
    sim.view.status = "stopping"
    sim.log.line("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    time.sleep(max(0.3, sim.s.seconds(2.0)))
    sim.log.line(
        "Gracefully exiting... Remaining number of requests 0. Remaining requests "
        "remaining_rids=[]."
    )
    sim.log.line("INFO:     Shutting down")
    sim.http.stop()
    sim.log.line("INFO:     Waiting for application shutdown.")
    sim.log.line("INFO:     Application shutdown complete.")
    sim.log.line(f"INFO:     Finished server process [{sim.pid}]")
    sim.store.release(sim.pid)
    return 0
