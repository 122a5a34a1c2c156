"""The simulator's command line: the part of SGLang's ``launch_server`` parser we simulate.

Built like ``ServerArgs.add_cli_args``: plain argparse with ``allow_abbrev`` left on, so ``--tp 8``
reaches ``--tp-size`` by prefix, ``--hicache-size 44.5`` fails with exit 2 and the usage on
stderr, and an unknown flag fails the same way. Flags the deployment passes but the simulation
does not act on are accepted and only echoed in the ``server_args=`` line.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from bot.sim import _lines

__all__ = [
    "HICACHE_RADIX_CONFLICT",
    "build_parser",
    "host_memory_mode_error",
    "parse_server_args",
    "server_args_repr",
]

#: SGLang's ValueError when HiCache and --disable-radix-cache are both given.
HICACHE_RADIX_CONFLICT = (
    "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive "
    "and cannot be used at the same time. Please use only one of them."
)

_MEM_LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_head"]


def build_parser(version: tuple[int, ...]) -> argparse.ArgumentParser:
    """SGLang's parser for the flags we simulate, in the dialect of ``version``."""
    parser = argparse.ArgumentParser(prog="launch_server.py")
    add = parser.add_argument
    add("--model-path", "--model", type=str, required=True, help="The path of the model weights.")
    add("--tokenizer-path", type=str, default=None)
    add("--host", type=str, default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--trust-remote-code", action="store_true")
    add("--served-model-name", type=str, default=None)
    add("--context-length", type=int, default=None)
    add("--dtype", type=str, default="auto")
    # SGLang picks the device itself when none is given; "cpu" is its CPU engine.
    add("--device", type=str, default=None)
    add("--kv-cache-dtype", type=str, default="auto")
    add("--mem-fraction-static", type=float, default=None)
    add("--max-running-requests", type=int, default=None)
    add("--max-total-tokens", type=int, default=None)
    add("--chunked-prefill-size", type=int, default=None)
    add("--max-prefill-tokens", type=int, default=16384)
    add("--schedule-policy", type=str, default="fcfs")
    add("--page-size", type=int, default=1)
    add("--tp-size", "--tensor-parallel-size", type=int, default=1)
    add("--dp-size", "--data-parallel-size", type=int, default=1)
    add("--pp-size", "--pipeline-parallel-size", type=int, default=1)
    add("--ep-size", "--expert-parallel-size", type=int, default=1)
    add("--enable-dp-attention", action="store_true")
    add("--log-level", type=str, default="info")
    add("--log-requests", action="store_true")
    add("--enable-metrics", action="store_true")
    add("--api-key", type=str, default=None)
    add("--admin-api-key", type=str, default=None)
    add("--watchdog-timeout", type=float, default=300)
    add("--attention-backend", type=str, default=None)
    add("--disable-radix-cache", action="store_true")
    add("--disable-cuda-graph", action="store_true")
    add("--disable-overlap-schedule", action="store_true")
    add("--cuda-graph-max-bs", type=int, default=None)
    add("--disable-custom-all-reduce", action="store_true")
    add("--num-continuous-decode-steps", type=int, default=1)
    add("--enable-mixed-chunk", action="store_true")
    add("--tool-call-parser", type=str, default=None)
    add("--reasoning-parser", type=str, default=None)
    add("--speculative-algorithm", type=str, default=None)
    add("--speculative-draft-model-path", type=str, default=None)
    add("--speculative-num-steps", type=int, default=None)
    add("--speculative-eagle-topk", type=int, default=None)
    add("--speculative-num-draft-tokens", type=int, default=None)
    hicache_names = ["--enable-hierarchical-cache"]
    if version >= (0, 5, 10):
        hicache_names.append("--enable-hicache")
    add(*hicache_names, dest="enable_hierarchical_cache", action="store_true")
    # 0.5.23 resolves an unset ratio after parsing (cache 2.0, buffer_only 1.2, a decode
    # server's retraction backup later), and an explicit one turns auto-sizing off.
    add("--hicache-ratio", type=float, default=None if version >= (0, 5, 20) else 2.0)
    add("--hicache-size", type=int, default=0)
    add(
        "--hicache-write-policy",
        type=str,
        choices=["write_back", "write_through", "write_through_selective"],
        default="write_through",
    )
    add(
        "--hicache-io-backend",
        type=str,
        choices=["direct", "kernel", "kernel_ascend"],
        default="kernel",
    )
    add(
        "--hicache-mem-layout",
        type=str,
        choices=_MEM_LAYOUTS,
        default="page_first" if version >= (0, 5, 15) else "layer_first",
    )
    add("--hicache-storage-backend", type=str, default=None)
    add(
        "--hicache-storage-prefetch-policy",
        type=str,
        choices=["best_effort", "wait_complete", "timeout"],
        default="timeout",
    )
    add("--hicache-storage-backend-extra-config", type=str, default=None)
    if version >= (0, 5, 20):
        add("--hicache-host-memory-fraction", type=float, default=0.8)
        add("--hicache-host-memory-mode", type=str, default="cache")
        modes = ["null", "prefill", "decode"]
        add("--disaggregation-mode", type=str, choices=modes, default="null")
        add("--disaggregation-decode-enable-offload-kvcache", action="store_true")
    return parser


def parse_server_args(argv: Sequence[str], version: tuple[int, ...]) -> argparse.Namespace:
    """Parse like SGLang (exit 2 with usage on stderr when argparse refuses), then fill defaults."""
    args = build_parser(version).parse_args(list(argv))
    if version >= (0, 5, 20):
        _resolve_hicache_ratio(args)
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    return args


def _resolve_hicache_ratio(args: argparse.Namespace) -> None:
    """0.5.23's ``handle_hicache_ratio_default`` (``arg_groups/hicache_hook.py``): an unset
    ratio becomes 1.2 under buffer_only, else 2.0 (a decode server's is resolved once its pool
    is built); an explicit ratio or size sets the fraction to None, which turns auto-sizing
    off."""
    explicit = args.hicache_ratio is not None or args.hicache_size > 0
    if args.hicache_ratio is None and args.disaggregation_mode != "decode":
        args.hicache_ratio = 1.2 if args.hicache_host_memory_mode == "buffer_only" else 2.0
    if explicit:
        args.hicache_host_memory_fraction = None


def host_memory_mode_error(args: argparse.Namespace) -> str | None:
    """0.5.23's ``validate_hicache_host_memory_mode`` (``arg_groups/hicache_hook.py``), run when
    a host pool is on the way (HiCache, or a decode server): the ValueError's text, or None."""
    mode = getattr(args, "hicache_host_memory_mode", None)
    if mode is None:
        return None  # a version without the flag
    decode = args.disaggregation_mode == "decode"
    if not (args.enable_hierarchical_cache or decode):
        return None
    if mode not in ("cache", "buffer_only"):
        return _lines.host_memory_mode_error(mode)
    if mode == "buffer_only" and args.hicache_storage_backend is None:
        return _lines.BUFFER_ONLY_NEEDS_STORAGE
    if mode == "buffer_only" and decode:
        return _lines.BUFFER_ONLY_ON_DECODE
    return None


def server_args_repr(args: argparse.Namespace, overrides: dict[str, Any], new: bool) -> str:
    """The arguments as SGLang's first log line prints them after ``server_args=``: 0.5.9's
    ``ServerArgs(model_path='...', ...)``, 0.5.23's resolved dict ``{'model_path': '...', ...}``
    (docs/sglang.md, Startup log)."""
    fields = dict(vars(args))
    fields.update(overrides)
    if new:
        return repr(fields)
    body = ", ".join(f"{key}={value!r}" for key, value in fields.items())
    return f"ServerArgs({body})"
