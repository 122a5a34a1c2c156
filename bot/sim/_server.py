"""One simulated ``python -m sglang.launch_server`` run: startup phases, serving, teardown.

The process stands for SGLang's whole tree (main process and one scheduler per local rank):
rank lines carry the rank's prefix, a failing rank's exception is followed by the parent's
sigquit line and a SIGKILL of the tree (exit status 137), and nothing is ever allocated.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from bot.errors import SimError
from bot.sim import _lines, _tqdm
from bot.sim._args import HICACHE_RADIX_CONFLICT, parse_server_args, server_args_repr
from bot.sim._http import HttpFront, ServerView
from bot.sim._load import LoadModel
from bot.sim._output import Log
from bot.sim._settings import SimSettings, load_settings
from bot.sim._sizing import GIB, RESERVE_BYTES, HostPool, host_pool, kv_gib
from bot.sim._state import StateStore, process_start_time, read_host_state
from bot.sim._tracebacks import main_traceback, scheduler_traceback

__all__ = ["main"]

HEARTBEAT_S = 0.25


class _Terminate(Exception):
    """SIGTERM arrived; raised only at the points where the simulation sleeps."""


@dataclass(frozen=True)
class Rank:
    tp: int
    pp: int
    dp: int
    gpu: int
    prefix: str


# The pin's progress is recorded in this many steps: the shared state shows RAM falling.
_PIN_STEPS = 20


def capture_sizes(count: int) -> list[int]:
    """SGLang's default decode batch sizes for CUDA graphs (52 on a large GPU)."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 513, 16)]
    return sizes[:count]


class Simulation:
    def __init__(self, settings: SimSettings, args: argparse.Namespace, log: Log) -> None:
        self.s = settings
        self.p = settings.profile
        self.args = args
        self.log = log
        self.store = StateStore(settings.state_dir)
        self.pid = os.getpid()
        self.rng = random.Random(self.pid)
        self.stop = threading.Event()
        self.ranks = [
            Rank(
                tp,
                pp,
                dp,
                (dp * args.pp_size + pp) * args.tp_size + tp,
                _lines.rank_prefix(tp, pp, dp, args.tp_size, args.pp_size, args.dp_size),
            )
            for dp in range(args.dp_size)
            for pp in range(args.pp_size)
            for tp in range(args.tp_size)
        ]
        self.fraction = (
            args.mem_fraction_static
            if args.mem_fraction_static is not None
            else self.p.default_mem_fraction_static
        )
        tokens = self.p.device_tokens_at(self.fraction)
        if args.max_total_tokens:
            tokens = min(tokens, args.max_total_tokens)
        self.device_tokens = tokens
        self.kv_gib = kv_gib(tokens, self.p.kv_bytes_per_token, args.page_size)
        # Pools of a hybrid model logged before the target's, and a draft model's after graphs.
        self.hybrid = [
            (round(tokens * pool.tokens_fraction), pool.kv_bytes_per_token)
            for pool in self.p.hybrid_pools
        ]
        self.draft_gib = (
            kv_gib(tokens, self.p.draft_kv_bytes_per_token, args.page_size)
            if self.p.draft_kv_bytes_per_token
            else 0.0
        )
        self.pool: HostPool | None = None
        if args.enable_hierarchical_cache:
            self.pool = host_pool(
                tokens,
                self.p.kv_bytes_per_token,
                args.hicache_ratio,
                args.hicache_size,
                args.page_size,
                factor=settings.failures.host_pool_x,
            )
        self.chunked = args.chunked_prefill_size or self.p.chunked_prefill_size
        self.max_running = args.max_running_requests or self.p.max_running_requests
        self.context_len = args.context_length or self.p.context_len
        self.host_bytes = int(
            (self.p.server_ram_gb_main + self.p.server_ram_gb_per_rank * len(self.ranks)) * 1e9
        )
        self.gpu_gib = 0.0
        # SGLang's CPU engine names its memory after the CPU; torch_native attention and
        # --disable-cuda-graph capture no graphs, nor does a CPU (docs/sglang.md, Startup log).
        self.cpu = args.device == "cpu"
        self.torch_native = args.attention_backend == "torch_native"
        self.graphs = not (args.disable_cuda_graph or self.torch_native or self.cpu)
        self.graph_gib = self.p.cuda_graph_gib if self.graphs else 0.0
        self.load = LoadModel(
            capacity=tokens,
            host_tokens=self.pool.tokens if self.pool else 0,
            model_name=args.served_model_name,
            new_dialect=settings.new_dialect,
        )
        self.http: HttpFront | None = None
        self.view: ServerView | None = None

    # -- helpers -------------------------------------------------------------------------------

    def sleep(self, at_real_time: float) -> None:
        if self.stop.wait(self.s.seconds(at_real_time)):
            raise _Terminate

    def each_rank(self, message: Callable[[Rank], str]) -> None:
        """One line per rank, in the shuffled order concurrent processes print them."""
        for rank in self.rng.sample(self.ranks, len(self.ranks)):
            self.log.line(message(rank), rank.prefix)

    def each_line(self, message: str) -> None:
        """The same message from every rank, in shuffled order."""
        self.each_rank(lambda r: message)

    def rank0(self, message: str) -> None:
        self.log.line(message, self.ranks[0].prefix)

    def jitter(self, value: float) -> float:
        return value * self.rng.uniform(0.97, 1.03)

    def set_gpu(self, gib: float) -> None:
        self.gpu_gib = gib
        used = int(gib * GIB)
        self.store.update(self.pid, gpu_bytes={str(r.gpu): used for r in self.ranks})

    def die(self, rank: Rank, where: str, exception_line: str, cause: str = "") -> NoReturn:
        """A rank fails: its traceback, the parent's sigquit line, the tree SIGKILLed (137)."""
        text = scheduler_traceback(where, exception_line, cause)
        self.log.line(f"Scheduler hit an exception: {text}", rank.prefix)
        self.log.line(_lines.SIGQUIT)
        self.kill_tree(release=True)

    def kill_tree(self, release: bool) -> NoReturn:
        """SGLang's kill_process_tree: everything, the parent included, dies by SIGKILL."""
        if release:
            self.store.release(self.pid)
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(self.pid, signal.SIGKILL)
        raise SystemExit(137)  # pragma: no cover - unreachable after SIGKILL

    def check_stall(self, phase: str) -> None:
        if self.s.failures.stall_after == phase:
            while True:
                self.sleep(3600)

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> int:
        record = {
            "pid": self.pid,
            "pid_start": process_start_time(self.pid),
            "kind": "server",
            "name": "python3 -m sglang.launch_server",
            "gpu_names": {
                str(r.gpu): "sglang::scheduler" + r.prefix.replace(" ", "_") for r in self.ranks
            },
            "host_bytes": self.host_bytes,
            "gpu_bytes": {},
            "started_at": time.time(),
            "release_after_s": self.s.seconds(self.p.leftover_release_s),
            # The GPUs whose processes were still unpinning after a kill in the field notes.
            "leftover_gpus": [r.gpu for r in self.ranks if r.gpu % 2 == 0],
        }
        self.store.put(record)
        beat = threading.Thread(target=self._heartbeat, daemon=True)
        beat.start()
        try:
            self._start()
            self._serve()
        except _Terminate:
            return self._terminate()
        return 0  # pragma: no cover - _serve only leaves by _Terminate

    def _heartbeat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            with contextlib.suppress(SimError):
                self.store.update(self.pid)

    def _start(self) -> None:
        p, new, args = self.p, self.s.new_dialect, self.args
        overrides = {"mem_fraction_static": self.fraction, "chunked_prefill_size": self.chunked}
        if self.torch_native:
            self.log.line(_lines.GRAPHS_OFF_TORCH_NATIVE)
        self.log.line("server_args=" + server_args_repr(args, overrides, new))
        self.sleep(p.phase("init"))
        self.check_stall("init")

        self.each_rank(lambda r: _lines.init_begin(new))
        self._check_gpus()
        started = time.monotonic()
        self.sleep(p.phase("init_parallel"))
        self.set_gpu(p.init_mem_usage_gib)
        elapsed = time.monotonic() - started
        self.each_rank(lambda r: _lines.init_end(new, self.jitter(elapsed), p.init_mem_usage_gib))
        self.check_stall("init_parallel")

        avail = self.free_gib - p.init_mem_usage_gib
        self.each_rank(lambda r: _lines.load_begin(avail))
        self._load_weights()
        self.set_gpu(self.gpu_gib + p.weights_gib)
        elapsed = time.monotonic() - started
        avail -= p.weights_gib
        self.each_rank(
            lambda r: _lines.load_end(
                new, self.jitter(elapsed), p.architecture, avail, p.weights_gib
            )
        )
        self.check_stall("load_weights")

        self.rank0(f"Using KV cache dtype: {p.kv_cache_dtype}")
        self.sleep(p.phase("kv_pool"))
        mha = p.attention.upper() == "MHA"
        hybrid_gib = 0.0
        for tokens, per_token in self.hybrid:
            size = kv_gib(tokens, per_token, args.page_size)
            hybrid_gib += size
            line = _lines.kv_allocated(new, p.kv_cache_dtype, tokens, size, mha)
            self.each_line(line)
        self.each_rank(
            lambda r: _lines.kv_allocated(
                new, p.kv_cache_dtype, self.device_tokens, self.kv_gib, mha
            )
        )
        avail -= self.kv_gib + hybrid_gib + p.other_pools_gib
        self.set_gpu(self.gpu_gib + self.kv_gib + hybrid_gib + p.other_pools_gib)
        self.each_rank(lambda r: _lines.memory_pool_end(avail))
        self.check_stall("kv_pool")

        if self.graphs:
            avail = self._graphs(avail)
        if self.draft_gib:
            # SGLang's EAGLE worker builds the draft model's runner after the target's graphs.
            self.sleep(p.phase("kv_pool"))
            self.each_rank(
                lambda r: _lines.kv_allocated(
                    new, p.kv_cache_dtype, self.device_tokens, self.draft_gib, mha
                )
            )
            avail -= self.draft_gib
            self.set_gpu(self.gpu_gib + self.draft_gib)
            self.each_rank(lambda r: _lines.memory_pool_end(avail))
        self.rank0(
            _lines.max_total_num_tokens(
                self.device_tokens,
                self.chunked,
                args.max_prefill_tokens,
                self.max_running,
                self.context_len,
                avail,
                self.cpu,
            )
        )
        self.check_stall("cuda_graph")

        if self.pool is not None:
            self._host_pool(self.pool)
        self.check_stall("host_pool")
        self._uvicorn()
        self.check_stall("http")
        self._warmup()
        self.check_stall("warmup")

    def _graphs(self, avail: float) -> float:
        """Capture the decode graphs on every rank; the memory left after them."""
        p, new = self.p, self.s.new_dialect
        sizes = capture_sizes(p.cuda_graph_batch_sizes)
        self.each_rank(lambda r: _lines.capture_begin(new, sizes, avail))
        started = time.monotonic()
        self._capture(sizes, avail)
        elapsed = time.monotonic() - started
        avail -= p.cuda_graph_gib
        self.set_gpu(self.gpu_gib + p.cuda_graph_gib)
        self.each_rank(
            lambda r: _lines.capture_end(new, self.jitter(elapsed), p.cuda_graph_gib, avail)
        )
        return avail

    @property
    def free_gib(self) -> float:
        return self.p.gpu_free_at_start_gib

    def _check_gpus(self) -> None:
        """Ranks past the last GPU fail; foreign memory on some GPUs is SGLang's unbalance."""
        for rank in self.ranks:
            if rank.gpu >= self.p.gpu_count:
                self.die(rank, "init", "RuntimeError: CUDA error: invalid device ordinal")
        snapshot = read_host_state(self.p, self.s.state_dir)
        free: dict[int, float] = {}
        for gpu in snapshot.gpus:
            foreign = sum(pr.used_bytes for pr in gpu.processes if pr.pid != self.pid)
            free[gpu.index] = max(0.0, self.free_gib - foreign / GIB)
        if len(self.ranks) < 2:
            return
        lowest = min(free[r.gpu] for r in self.ranks)
        for rank in self.ranks:
            local = free[rank.gpu]
            if lowest < local * 0.9:
                message = _lines.unbalanced_error(lowest, local)
                self.die(rank, "init", f"ValueError: {message}")

    def _load_weights(self) -> None:
        shards = self.p.model_shards
        per_shard = self.p.phase("load_weights") / shards
        started = time.monotonic()
        new = self.s.new_dialect
        end = "" if new else "\n"
        self.log.bar(_tqdm.shards_line(0, shards, 0.0, new), end)
        for n in range(1, shards + 1):
            self.sleep(per_shard)
            if self.s.failures.crash_loading and n == max(1, shards // 2):
                self.log.err("\n")
                error = (
                    "safetensors_rust.SafetensorError: Error while deserializing header: "
                    "MetadataIncompleteBuffer"
                )
                self.die(self.ranks[0], "load", error)
            self.log.bar(_tqdm.shards_line(n, shards, time.monotonic() - started, new), end)
        if new:
            self.log.err("\n")

    def _capture(self, sizes: list[int], avail: float) -> None:
        total = len(sizes)
        step = self.p.phase("cuda_graph") / total
        started = time.monotonic()
        for i, bs in enumerate(reversed(sizes)):
            mem = avail - self.p.cuda_graph_gib * i / total
            desc = f"Capturing batches (bs={bs} avail_mem={mem:.2f} GB)"
            self.log.bar(_tqdm.bar_line(desc, i, total, time.monotonic() - started))
            self.sleep(step)
            if self.s.failures.gpu_oom_graph and i == total // 3:
                self.log.err("\n")
                oom = _lines.CUDA_OOM.format(total=self.p.gpu_memory_gib, free=0.12)
                cause = (
                    'Traceback (most recent call last):\n  File "/usr/local/lib/python3.12/'
                    'dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 370, '
                    f"in __init__\n    self.capture()\ntorch.OutOfMemoryError: {oom}\n"
                )
                line = (
                    f"Exception: Capture cuda graph failed: {oom}\nPossible solutions:\n"
                    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
                    "3. disable torch compile by not using --enable-torch-compile\n"
                    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge "
                    "performance loss)\nOpen an issue on GitHub "
                    "https://github.com/sgl-project/sglang/issues/new/choose \n"
                )
                self.die(self.ranks[0], "graph", line, cause)
        self.log.bar(_tqdm.bar_line(desc, total, total, time.monotonic() - started), "\n")

    def _host_pool(self, pool: HostPool) -> None:
        """Size check, ``Allocating ...`` on every rank, then the silent pin (and 0.5.9's OOM)."""
        self.sleep(self.p.phase("host_pool"))
        new = self.s.new_dialect
        if self.s.version_tuple <= (0, 5, 12) and pool.tokens <= self.device_tokens:
            self.die(self.ranks[0], "host_assert", f"AssertionError: {_lines.HOST_SMALLER}")
        others = sum(
            s.host_bytes
            for s in read_host_state(self.p, self.s.state_dir).servers
            if s.pid != self.pid
        )
        available = self.p.ram_available_bytes - others - self.host_bytes
        if self.s.version_tuple >= (0, 5, 20):
            budget = (available - RESERVE_BYTES) // len(self.ranks)
        else:
            budget = available - RESERVE_BYTES
        if pool.bytes > budget:
            message = _lines.host_memory_error(pool.gb, budget / 1e9)
            failing = self.rng.sample(self.ranks, len(self.ranks))
            for rank in failing:
                text = scheduler_traceback("host_pool", f"ValueError: {message}")
                self.log.line(f"Scheduler hit an exception: {text}", rank.prefix)
            self.log.line(_lines.SIGQUIT)
            self.kill_tree(release=True)
        self.each_rank(lambda r: _lines.allocating_host(new, pool.tokens, pool.gb))
        pinned = pool.bytes
        for name, per_token in self.p.host_extra_pools:
            # A DSA indexer holds the KV host pool's tokens: allocated after it, RAM all the same.
            extra = pool.tokens * per_token
            if extra > budget - pool.bytes:
                message = _lines.host_extra_error(name, extra / 1e9, (budget - pool.bytes) / 1e9)
                text = scheduler_traceback("host_pool", f"ValueError: {message}")
                self.log.line(f"Scheduler hit an exception: {text}", self.ranks[0].prefix)
                self.log.line(_lines.SIGQUIT)
                self.kill_tree(release=True)
            line = _lines.allocating_host_extra(name, extra / 1e9)
            self.each_line(line)
            pinned += extra
        self._pin(pinned * len(self.ranks), pinned / 1e9 / self.p.pin_gb_per_s)

    def _pin(self, total_bytes: int, pin_s: float) -> None:
        """The ranks pin at once, so the host's RAM falls in step with the pin (recorded in
        ``_PIN_STEPS`` steps); when it runs out, the kernel OOM killer strikes."""
        pin_s *= self.s.failures.slow_pin
        base = self.host_bytes
        for step in range(1, _PIN_STEPS + 1):
            self.sleep(pin_s / _PIN_STEPS)
            self.host_bytes = base + total_bytes * step // _PIN_STEPS
            self.store.update(self.pid, host_bytes=self.host_bytes)
            others = sum(
                s.host_bytes
                for s in read_host_state(self.p, self.s.state_dir).servers
                if s.pid != self.pid
            )
            if others + self.host_bytes > self.p.ram_available_bytes:
                self._oom_killed()

    def _oom_killed(self) -> NoReturn:
        victim = self.ranks[-1]
        if self.s.version_tuple >= (0, 5, 10):
            frames = [
                (
                    "sglang/srt/entrypoints/engine.py",
                    1277,
                    "_wait_for_scheduler_ready",
                    "raise _scheduler_died_error(i, scheduler_procs[i])",
                )
            ]
            self.log.err(
                main_traceback(
                    frames, "RuntimeError: " + _lines.scheduler_died(self.ranks.index(victim), -9)
                )
            )
        # 0.5.9 says nothing: the OOM kill is silent and the tree goes down with it. The pinned
        # pools are unpinned slowly, so the GPUs stay held for a while (release=False).
        self.kill_tree(release=False)

    def _uvicorn(self) -> None:
        args = self.args
        self.view = ServerView(
            server_info=self.server_info(),
            ready_endpoint=self.s.version_tuple >= (0, 5, 20),
            metrics_enabled=args.enable_metrics,
            metrics=lambda: self.load.metrics(
                self.s.version_tuple >= (0, 5, 10) and self.pool is not None
            ),
            health_flap=self.s.failures.health_flap,
            on_generate=lambda: self.rank0(self.load.warmup()),
        )
        try:
            self.http = HttpFront(args.host, args.port, self.view, self.log)
        except OSError as exc:
            reason = (exc.strerror or "address already in use").lower()
            self.log.line(
                f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                f"('{args.host}', {args.port}): {reason}"
            )
            self.kill_tree(release=True)
        self.http.start()
        self.log.line(f"INFO:     Started server process [{self.pid}]")
        self.log.line("INFO:     Waiting for application startup.")
        self.log.line("INFO:     Application startup complete.")
        self.log.line(
            f"INFO:     Uvicorn running on http://{args.host}:{self.http.port} "
            "(Press CTRL+C to quit)"
        )
        self.sleep(self.p.phase("http"))

    def _warmup(self) -> None:
        assert self.http is not None
        assert self.view is not None
        host = "127.0.0.1" if self.args.host in ("0.0.0.0", "") else self.args.host
        base = f"http://{host}:{self.http.port}"
        with urllib.request.urlopen(f"{base}/model_info", timeout=10) as reply:
            reply.read()
        self.sleep(self.p.phase("warmup"))
        request = urllib.request.Request(
            f"{base}/generate", data=b'{"text":"The capital city of France is"}', method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()
        self.view.status = "ready"
        self.log.line(_lines.READY)

    def _serve(self) -> None:
        rate = self.s.load_rate
        tick = max(0.05, self.s.seconds(1.0)) if rate else 0.25
        while True:
            if self.stop.wait(tick):
                raise _Terminate
            if rate:
                arrivals = sum(1 for _ in range(int(rate * 4)) if self.rng.random() < 0.25)
                for message in self.load.tick(arrivals, tick):
                    self.rank0(message)

    def _terminate(self) -> int:
        """SIGTERM: before HTTP, die as Python does; after, drain with /health 503, exit 0."""
        if self.http is None or self.view is None:
            self.store.release(self.pid)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(self.pid, signal.SIGTERM)
            return 143  # pragma: no cover - the default action ends the process first
        self.view.status = "stopping"
        self.log.line(
            "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
        )
        time.sleep(max(0.3, self.s.seconds(2.0)))
        self.log.line(
            "Gracefully exiting... Remaining number of requests 0. Remaining requests "
            "remaining_rids=[]."
        )
        self.log.line("INFO:     Shutting down")
        self.http.stop()
        self.log.line("INFO:     Waiting for application shutdown.")
        self.log.line("INFO:     Application shutdown complete.")
        self.log.line(f"INFO:     Finished server process [{self.pid}]")
        self.store.release(self.pid)
        return 0

    def server_info(self) -> dict[str, object]:
        """``/server_info``: ServerArgs flat, scheduler figures, internal states, version."""
        info: dict[str, object] = dict(vars(self.args))
        info.update(mem_fraction_static=self.fraction, chunked_prefill_size=self.chunked)
        info["max_total_num_tokens"] = self.device_tokens
        info["max_req_input_len"] = self.context_len - 5
        state = {
            "memory_usage": {
                "weight": self.p.weights_gib,
                "kvcache": round(self.kv_gib, 2),
                "token_capacity": self.device_tokens,
                "graph": self.graph_gib,
            },
            "last_gen_throughput": 0.0,
        }
        info["internal_states"] = [state for _ in range(self.args.dp_size)]
        info["version"] = self.s.version
        return info


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
    sim = Simulation(settings, args, log)
    signal.signal(signal.SIGTERM, lambda signum, frame: sim.stop.set())
    return sim.run()
