"""Serving: the HTTP front opens, warmup's request, the steady load, and SIGTERM's drain."""

from __future__ import annotations

import os
import signal
import time
import urllib.request

from bot.sim import _lines
from bot.sim._hicache_api import LiveHiCacheState
from bot.sim._http import HttpFront, ServerView
from bot.sim._requests import InFlight
from bot.sim._simulation import Simulation, Terminated

__all__ = ["open_http", "serve", "terminate", "warm_up"]


def open_http(sim: Simulation) -> None:
    args = sim.args
    in_flight = InFlight(args.dp_size)
    sim.view = ServerView(
        server_info=sim.server_info(),
        ready_endpoint=sim.s.version_tuple >= (0, 5, 20),
        metrics_enabled=args.enable_metrics,
        metrics=lambda: sim.load.metrics(
            sim.s.version_tuple >= (0, 5, 10) and sim.pool is not None, in_flight.in_flight()
        ),
        health_flap=sim.s.failures.health_flap,
        on_generate=lambda: sim.rank0(sim.load.warmup()),
        in_flight=in_flight,
        generate_s=sim.s.generate_s,
        synthetic=sim.load.counts,
    )
    if sim.s.version_tuple >= (0, 5, 23):
        view = sim.view
        # Built from the command line in this process: a restart forgets every live change.
        view.hicache = LiveHiCacheState(
            args, view.busy, apply_fails=sim.s.failures.live_not_applied
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
    """SIGTERM: before HTTP, die as Python does; after, refuse new requests (503, /health 503),
    let those running finish, exit 0."""
    if sim.http is None or sim.view is None:
        sim.store.release(sim.pid)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(sim.pid, signal.SIGTERM)
        return 143  # pragma: no cover - the default action ends the process first
    sim.view.status = "stopping"
    sim.view.in_flight.stop_accepting()
    sim.log.line("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    time.sleep(max(0.3, sim.s.seconds(2.0)))
    # SGLang's graceful exit reports what still runs every few seconds until nothing does; the
    # service manager's own stop timeout is the backstop (the agent's stop_grace_s here).
    period = max(0.2, sim.s.seconds(5.0))
    while True:
        remaining = sim.view.in_flight.wait_idle(period)
        sim.log.line(
            f"Gracefully exiting... Remaining number of requests {remaining}. Remaining requests "
            "remaining_rids=[]."
        )
        if remaining == 0:
            break
    sim.log.line("INFO:     Shutting down")
    sim.http.stop()
    sim.log.line("INFO:     Waiting for application shutdown.")
    sim.log.line("INFO:     Application shutdown complete.")
    sim.log.line(f"INFO:     Finished server process [{sim.pid}]")
    sim.store.release(sim.pid)
    return 0
