"""SGLang's Prometheus gauges (``--enable-metrics``) as the figures a report shows.

The text exposition SGLang serves on ``/metrics``::

    sglang:token_usage{model_name="kimi"} 0.97
    sglang:num_queue_reqs{model_name="kimi"} 80.0
    -> ServerMetrics(token_usage=0.97, queued_requests=80, ...)

The rules (fractions averaged over data-parallel ranks, counts summed) are
:func:`bot.prometheus.server_metrics`', shared with the agent's ``/v1/status``.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.prometheus import ServerMetrics, server_metrics

__all__ = ["metrics_from_mapping"]


def metrics_from_mapping(samples: Mapping[str, list[float]]) -> ServerMetrics | None:
    """The report's figures from parsed gauges; None when the server exported none of them."""
    return server_metrics(samples)
