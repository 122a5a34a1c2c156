"""``python -m bot.sim.stray --gpus 0,1 [--gib 20] [--ram-gb 0]``: a leftover SGLang scheduler,
or (``--ram-gb`` alone) another process on the host eating its RAM.

It registers itself in the simulated host's state as a compute process holding ``--gib`` GiB on
each listed GPU (as orphaned ``sglang::scheduler_TP*`` processes do: docs/sglang.md, Failure
and teardown) and ``--ram-gb`` GB of host RAM, names itself ``sglang::scheduler_TP0`` where the
OS allows it, and sleeps until killed. Its memory is freed when it exits.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from bot.errors import SimError
from bot.sim._settings import load_settings
from bot.sim._sizing import GIB
from bot.sim._state import StateStore, process_start_time

__all__ = ["main"]

PROCESS_NAME = "sglang::scheduler_TP0"


def _gpu_list(text: str) -> list[int]:
    try:
        gpus = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of GPU indexes like 0,1") from exc
    if not gpus or any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of GPU indexes like 0,1")
    return gpus


def _set_process_name(name: str) -> None:
    """Best effort: the name ``ps -o comm`` and ``/proc/<pid>/comm`` show (15 bytes at most)."""
    try:
        libc = ctypes.CDLL(None)
        pr_set_name = 15
        libc.prctl(pr_set_name, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot.sim.stray", description=__doc__)
    parser.add_argument("--gpus", type=_gpu_list, default=[], help="GPU indexes, e.g. 0,1")
    parser.add_argument("--gib", type=float, default=20.0, help="GiB held on each GPU")
    parser.add_argument("--ram-gb", type=float, default=0.0, help="host RAM held, GB (1e9)")
    args = parser.parse_args(argv)
    if not args.gpus and args.ram_gb <= 0:
        parser.error("give --gpus to hold GPU memory, --ram-gb to hold host RAM, or both")
    try:
        settings = load_settings(os.environ)
    except SimError as exc:
        print(f"bot.sim.stray: {exc}", file=sys.stderr)
        return 2
    bad = [g for g in args.gpus if g >= settings.profile.gpu_count]
    if bad or args.gib <= 0 or args.ram_gb < 0:
        print(
            f"bot.sim.stray: GPUs {bad} do not exist on {settings.profile.name} "
            f"({settings.profile.gpu_count} GPUs), or --gib {args.gib} is not > 0, or "
            f"--ram-gb {args.ram_gb} is negative",
            file=sys.stderr,
        )
        return 2
    _set_process_name(PROCESS_NAME)
    store = StateStore(settings.state_dir)
    pid = os.getpid()
    store.put(
        {
            "pid": pid,
            "pid_start": process_start_time(pid),
            "kind": "stray",
            "name": PROCESS_NAME,
            "gpu_names": {},
            "host_bytes": int(args.ram_gb * 1e9),
            "gpu_bytes": {str(g): int(args.gib * GIB) for g in args.gpus},
            "started_at": time.time(),
            "release_after_s": 0.0,
            "leftover_gpus": [],
        }
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    print(
        f"{PROCESS_NAME} (pid {pid}) holds {args.gib:g} GiB on GPUs {args.gpus} and "
        f"{args.ram_gb:g} GB of host RAM",
        flush=True,
    )
    while not stop.wait(0.5):
        store.update(pid)
    store.release(pid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
