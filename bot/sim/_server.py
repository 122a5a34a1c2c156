"""One simulated ``python -m sglang.launch_server`` run: arguments, the run, its exit status."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from bot.errors import SimError
from bot.sim._args import HICACHE_RADIX_CONFLICT, host_memory_mode_error, parse_server_args
from bot.sim._output import Log
from bot.sim._serving import serve, terminate
from bot.sim._settings import load_settings
from bot.sim._simulation import Simulation, Terminated
from bot.sim._startup_phases import start_up
from bot.sim._state import process_start_time
from bot.sim._tracebacks import main_traceback

__all__ = ["main"]


def run(sim: Simulation) -> int:
    """Record the server in the host state, start it up and serve until SIGTERM."""
    record = {
        "pid": sim.pid,
        "pid_start": process_start_time(sim.pid),
        "kind": "server",
        "name": "python3 -m sglang.launch_server",
        "gpu_names": {
            str(r.gpu): "sglang::scheduler" + r.prefix.replace(" ", "_") for r in sim.ranks
        },
        "host_bytes": sim.host_bytes,
        # Shared mappings (torch's libraries, shared memory) are part of host_bytes, once.
        "shared_bytes": int(sim.p.shared_gb * 1e9),
        "processes": len(sim.ranks) + 2,  # the main process, the schedulers, the detokenizer
        "gpu_bytes": {},
        "started_at": time.time(),
        "release_after_s": sim.s.seconds(sim.p.leftover_release_s),
        # The GPUs whose processes were still unpinning after a kill in the field notes.
        "leftover_gpus": [r.gpu for r in sim.ranks if r.gpu % 2 == 0],
    }
    sim.store.put(record)
    beat = threading.Thread(target=sim.heartbeat, daemon=True)
    beat.start()
    try:
        start_up(sim)
        serve(sim)
    except Terminated:
        return terminate(sim)
    return 0  # pragma: no cover - _serve only leaves by Terminated


_SERVER_ARGS_FRAMES = [
    ("sglang/launch_server.py", 29, "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
    (
        "sglang/srt/server_args.py",
        4402,
        "prepare_server_args",
        "return ServerArgs.from_cli_args(raw_args)",
    ),
    (
        "sglang/srt/server_args.py",
        4210,
        "from_cli_args",
        "return cls(**{attr: getattr(args, attr) for attr in attrs})",
    ),
    ("sglang/srt/server_args.py", 724, "__post_init__", "self.check_server_args()"),
    ("sglang/srt/server_args.py", 4290, "check_server_args", "raise ValueError("),
]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bot.sim [launch_server arguments]``; returns the exit status."""
    try:
        settings = load_settings(os.environ)
    except SimError as exc:
        print(f"bot.sim: {exc}", file=sys.stderr)
        return 2
    args = parse_server_args(sys.argv[1:] if argv is None else argv, settings.version_tuple)
    log = Log(sys.stdout, sys.stderr)
    for name in ("tp_size", "dp_size", "pp_size", "page_size"):
        if getattr(args, name) < 1:
            log.err(main_traceback(_SERVER_ARGS_FRAMES, f"ValueError: {name} must be >= 1"))
            return 1
    if args.enable_hierarchical_cache and args.disable_radix_cache:
        log.err(main_traceback(_SERVER_ARGS_FRAMES, f"ValueError: {HICACHE_RADIX_CONFLICT}"))
        return 1
    mode_error = host_memory_mode_error(args)
    if mode_error is not None:
        log.err(main_traceback(_SERVER_ARGS_FRAMES, f"ValueError: {mode_error}"))
        return 1
    sim = Simulation(settings, args, log)
    signal.signal(signal.SIGTERM, lambda signum, frame: sim.stop.set())
    return run(sim)
