"""Synthetic load (``KIMI_SIM_LOAD``): moves the Prometheus gauges and prints batch lines.

Each tick admits arriving requests while the device KV pool has room (the rest queue), advances
decoding, and retires finished requests; the counters feed ``/metrics`` and the
``Prefill batch, ...`` / ``Decode batch, ...`` lines rank 0 prints.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

from bot.sim import _lines

__all__ = ["LoadModel"]

PROMPT_TOKENS = 4000
OUTPUT_TOKENS = 400


@dataclass
class _Req:
    tokens: int
    remaining: int


@dataclass
class LoadModel:
    """Requests in flight on a simulated server with ``capacity`` device KV tokens."""

    capacity: int
    host_tokens: int
    model_name: str
    new_dialect: bool
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    running: list[_Req] = field(default_factory=list)
    queued: int = 0
    prompt_total: int = 0
    generation_total: int = 0
    cached_total: int = 0
    hit_rate: float = 0.0
    gen_throughput: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def used_tokens(self) -> int:
        return sum(r.tokens for r in self.running)

    @property
    def usage(self) -> float:
        return self.used_tokens / self.capacity if self.capacity else 0.0

    def counts(self) -> tuple[int, int]:
        """The synthetic requests (running, queued)."""
        with self._lock:
            return len(self.running), self.queued

    def warmup(self) -> str:
        """The warmup request's prefill line (7 tokens, nothing cached, nothing running)."""
        with self._lock:
            self.prompt_total += 7
            self.generation_total += 3
        return _lines.prefill_batch(self.new_dialect, 1, 7, 0, 0.0, 0, 0, 35.0)

    def tick(self, arrivals: int, tick_seconds: float) -> list[str]:
        """Advance one tick; return the batch lines (message parts) it logs."""
        out: list[str] = []
        with self._lock:
            self.queued += arrivals
            admitted = 0
            new_tokens = cached = 0
            while self.queued and self.used_tokens + PROMPT_TOKENS <= self.capacity:
                self.queued -= 1
                admitted += 1
                hit = int(PROMPT_TOKENS * self.rng.uniform(0.2, 0.6))
                cached += hit
                new_tokens += PROMPT_TOKENS - hit
                self.running.append(_Req(PROMPT_TOKENS, OUTPUT_TOKENS))
            if admitted:
                self.prompt_total += new_tokens + cached
                self.cached_total += cached
                self.hit_rate = self.cached_total / max(1, self.prompt_total)
                out.append(
                    _lines.prefill_batch(
                        self.new_dialect,
                        admitted,
                        new_tokens,
                        cached,
                        self.usage,
                        len(self.running),
                        self.queued,
                        new_tokens / max(tick_seconds, 1e-3),
                    )
                )
            steps = 40
            for req in self.running:
                made = min(steps, req.remaining)
                req.remaining -= made
                req.tokens += made
                self.generation_total += made
            done = [r for r in self.running if r.remaining <= 0]
            self.running = [r for r in self.running if r.remaining > 0]
            self.gen_throughput = steps * (len(self.running) + len(done)) / max(tick_seconds, 1e-3)
            if self.running:
                out.append(
                    _lines.decode_batch(
                        len(self.running),
                        self.used_tokens,
                        self.usage,
                        self.gen_throughput,
                        self.queued,
                    )
                )
        return out

    def metrics(self, with_host_tokens: bool, generating: int = 0) -> str:
        """Prometheus text exposition of the gauges SGLang exports with ``--enable-metrics``;
        ``generating`` requests of ``/generate`` run besides the synthetic ones."""
        label = f'{{model_name="{self.model_name}"}}'
        with self._lock:
            gauges = [
                ("token_usage", "The token usage", self.usage),
                (
                    "num_running_reqs",
                    "The number of running requests",
                    len(self.running) + generating,
                ),
                ("num_queue_reqs", "The number of requests in the waiting queue", self.queued),
                ("cache_hit_rate", "The prefix cache hit rate", self.hit_rate),
                ("gen_throughput", "The generation throughput (token/s)", self.gen_throughput),
                ("num_used_tokens", "The number of used tokens", self.used_tokens),
                ("max_total_num_tokens", "Maximum total number of tokens", self.capacity),
            ]
            if with_host_tokens:
                gauges.append(
                    ("hicache_host_total_tokens", "Total tokens in the host pool", self.host_tokens)
                )
            counters = [
                ("prompt_tokens_total", "Number of prefill tokens processed.", self.prompt_total),
                ("generation_tokens_total", "Number of generation tokens.", self.generation_total),
                ("cached_tokens_total", "Number of cached prompt tokens.", self.cached_total),
            ]
        lines: list[str] = []
        for name, help_text, value in gauges:
            lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} gauge"]
            lines.append(f"sglang:{name}{label} {float(value)}")
        for name, help_text, value in counters:
            lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} counter"]
            lines.append(f"sglang:{name}{label} {float(value)}")
        return "\n".join(lines) + "\n"
