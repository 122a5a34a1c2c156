"""Prometheus's text exposition, as SGLang serves it on ``/metrics`` (``--enable-metrics``).

One parser for the agent (which sums repeated gauges) and the reports (which average fractions
over data-parallel ranks)::

    sglang:num_queue_reqs{model_name="kimi",dp_rank="0"} 80.0
    sglang:num_queue_reqs{model_name="kimi",dp_rank="1"} 20.0
    -> prometheus_samples: {"sglang:num_queue_reqs": [80.0, 20.0]}
    -> prometheus_sums:    {"sglang:num_queue_reqs": 100.0}
"""

from __future__ import annotations

import math

__all__ = ["prometheus_samples", "prometheus_sums"]


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
