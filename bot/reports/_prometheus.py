"""SGLang's Prometheus gauges (``--enable-metrics``) as the figures a report shows.

The text exposition SGLang serves on ``/metrics``::

    sglang:token_usage{model_name="kimi"} 0.97
    sglang:num_queue_reqs{model_name="kimi"} 80.0
    -> ServerMetrics(token_usage=0.97, queued_requests=80, ...)

A gauge repeated under several labels (one per data-parallel rank) is averaged for fractions and
summed for counts, so two DP ranks at 90 % read 90 %, and their queues add up.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.reports.model import ServerMetrics

__all__ = ["metrics_from_mapping"]

_FRACTIONS = ("sglang:token_usage", "sglang:cache_hit_rate")


def _fraction(values: list[float] | None) -> float | None:
    if not values:
        return None
    return min(1.0, max(0.0, sum(values) / len(values)))


def _count(values: list[float] | None) -> int | None:
    return None if not values else max(0, round(sum(values)))


def metrics_from_mapping(samples: Mapping[str, list[float]]) -> ServerMetrics | None:
    """The report's figures from parsed gauges; None when the server exported none of them."""
    metrics = ServerMetrics(
        token_usage=_fraction(samples.get("sglang:token_usage")),
        running_requests=_count(samples.get("sglang:num_running_reqs")),
        queued_requests=_count(samples.get("sglang:num_queue_reqs")),
        cache_hit_rate=_fraction(samples.get("sglang:cache_hit_rate")),
        host_total_tokens=_count(samples.get("sglang:hicache_host_total_tokens")),
    )
    return None if metrics == ServerMetrics() else metrics
