"""Prometheus's text exposition, as SGLang serves it on ``/metrics`` (``--enable-metrics``).

One parser for the agent and the reports, and one reading of SGLang's gauges as the figures
kimi-ops shows (:func:`server_metrics`): a gauge repeated under several labels (one per
data-parallel rank) is averaged for fractions and summed for counts, so two DP ranks at 90 %
read 90 %, and their queues add up::

    sglang:num_queue_reqs{model_name="kimi",dp_rank="0"} 80.0
    sglang:num_queue_reqs{model_name="kimi",dp_rank="1"} 20.0
    sglang:token_usage{model_name="kimi",dp_rank="0"} 0.9
    sglang:token_usage{model_name="kimi",dp_rank="1"} 0.5
    -> prometheus_samples: {"sglang:num_queue_reqs": [80.0, 20.0], "sglang:token_usage": [...]}
    -> prometheus_sums:    {"sglang:num_queue_reqs": 100.0, ...}
    -> server_metrics:     ServerMetrics(token_usage=0.7, queued_requests=100, ...)

The agent carries :class:`ServerMetrics` in its ``/v1/status`` (``metrics``, the field names
below), read back by :mod:`bot.agent_json`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ServerMetrics", "prometheus_samples", "prometheus_sums", "server_metrics"]


@dataclass(frozen=True)
class ServerMetrics:
    """What SGLang's ``/metrics`` says; a figure it did not export is None."""

    token_usage: float | None = None  # the device KV pool's used share, 0..1
    running_requests: int | None = None
    queued_requests: int | None = None
    cache_hit_rate: float | None = None  # the prefix cache's, 0..1
    host_total_tokens: int | None = None  # HiCache's host pool, where SGLang exports it


def _fraction(values: list[float] | None) -> float | None:
    return None if not values else min(1.0, max(0.0, sum(values) / len(values)))


def _count(values: list[float] | None) -> int | None:
    return None if not values else max(0, round(sum(values)))


def server_metrics(samples: Mapping[str, list[float]]) -> ServerMetrics | None:
    """The figures of :func:`prometheus_samples`' gauges; None when SGLang exported none."""
    metrics = ServerMetrics(
        token_usage=_fraction(samples.get("sglang:token_usage")),
        running_requests=_count(samples.get("sglang:num_running_reqs")),
        queued_requests=_count(samples.get("sglang:num_queue_reqs")),
        cache_hit_rate=_fraction(samples.get("sglang:cache_hit_rate")),
        host_total_tokens=_count(samples.get("sglang:hicache_host_total_tokens")),
    )
    return None if metrics == ServerMetrics() else metrics


def prometheus_samples(text: str) -> dict[str, list[float]]:
    """Every sample of every metric, by name, labels dropped; comments, malformed lines and
    non-finite values are skipped."""
    out: dict[str, list[float]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            _, _, rest = rest.rpartition("}")
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        name = name.strip()
        if not name or not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            out.setdefault(name, []).append(value)
    return out


def prometheus_sums(text: str) -> dict[str, float]:
    """``{metric name: the sum of its samples}``."""
    return {name: sum(values) for name, values in prometheus_samples(text).items()}
