"""The state of one simulated SGLang run and the moves every phase makes with it.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from bot.errors import SimError
from bot.sim import _lines
from bot.sim._http import HttpFront, ServerView
from bot.sim._load import LoadModel
from bot.sim._output import Log
from bot.sim._settings import SimSettings
from bot.sim._sizing import (
    BACKUP_ONLY_RATIO,
    GIB,
    HostPool,
    decode_backup_ratio,
    host_pool,
    kv_gib,
)
from bot.sim._state import StateStore
from bot.sim._tracebacks import scheduler_traceback

__all__ = ["HEARTBEAT_S", "Rank", "Simulation", "Terminated", "capture_sizes"]

HEARTBEAT_S = 0.25


class Terminated(Exception):
    """SIGTERM arrived; raised only at the points where the simulation sleeps."""


@dataclass(frozen=True)
class Rank:
    tp: int
    pp: int
    dp: int
    gpu: int
    prefix: str


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
        self.ratio: float | None = args.hicache_ratio
        # 0.5.23: a decode server keeps a host pool to back retracted requests up, HiCache on
        # or not (``kv_cache_builder.py``): on MHA, unless offload owns one already.
        self.decode_backup = (
            getattr(args, "disaggregation_mode", "null") == "decode"
            and not args.enable_hierarchical_cache
            and not args.disaggregation_decode_enable_offload_kvcache
            and self.p.attention.upper() == "MHA"
        )
        if self.decode_backup and self.ratio is None:
            self.ratio = (
                decode_backup_ratio(tokens, self.p.context_len, args.page_size)
                if args.hicache_size == 0
                else BACKUP_ONLY_RATIO
            )
        elif self.ratio is None:
            self.ratio = 2.0  # a decode server with HiCache: the standard default
        # Auto-sizing lowers the ratio once the host's headroom is read (the host pool phase).
        self.auto_size = (
            settings.version_tuple >= (0, 5, 20)
            and getattr(args, "hicache_host_memory_fraction", None) is not None
        )
        if args.enable_hierarchical_cache or self.decode_backup:
            self.pool = self.host_pool_at(self.ratio)
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

    def host_pool_at(self, ratio: float) -> HostPool:
        """One rank's host pool at ``ratio`` (or the explicit size)."""
        return host_pool(
            self.device_tokens,
            self.p.kv_bytes_per_token,
            ratio,
            self.args.hicache_size,
            self.args.page_size,
            factor=self.s.failures.host_pool_x,
        )

    @property
    def device_pool_bytes(self) -> int:
        """The device bytes 0.5.23's auto-sizing scales by the ratio: the KV pools (a hybrid
        model's all of them) and a draft model's, each with its padding page."""
        page = int(self.args.page_size)
        total = (self.device_tokens + page) * self.p.kv_bytes_per_token
        total += sum((tokens + page) * per_token for tokens, per_token in self.hybrid)
        if self.p.draft_kv_bytes_per_token:
            total += (self.device_tokens + page) * self.p.draft_kv_bytes_per_token
        return total

    def sleep(self, at_real_time: float) -> None:
        if self.stop.wait(self.s.seconds(at_real_time)):
            raise Terminated

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

    def heartbeat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            with contextlib.suppress(SimError):
                self.store.update(self.pid)

    @property
    def free_gib(self) -> float:
        return self.p.gpu_free_at_start_gib

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
