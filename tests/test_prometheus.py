"""The one reader of SGLang's ``/metrics`` text, shared by the agent and the reports."""

from __future__ import annotations

from bot.prometheus import prometheus_samples, prometheus_sums

TWO_DP_RANKS = """\
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="kimi",dp_rank="0"} 80.0
sglang:num_queue_reqs{model_name="kimi",dp_rank="1"} 20.0
sglang:token_usage{model_name="kimi",dp_rank="0"} 0.9
sglang:token_usage{model_name="kimi",dp_rank="1"} 0.5
process_cpu_seconds_total 12.5
sglang:broken{model_name="kimi"}
sglang:not_a_number{model_name="kimi"} fast
sglang:infinite{model_name="kimi"} +Inf
"""


def test_samples_keep_every_rank_and_skip_what_is_not_a_finite_value() -> None:
    """Each labelled sample is kept in order; comments, missing, unparsable and infinite values
    are not."""
    assert prometheus_samples(TWO_DP_RANKS) == {
        "sglang:num_queue_reqs": [80.0, 20.0],
        "sglang:token_usage": [0.9, 0.5],
        "process_cpu_seconds_total": [12.5],
    }


def test_sums_add_the_ranks_up() -> None:
    """Two ranks' queues of 80 and 20 read as 100 waiting requests."""
    sums = prometheus_sums(TWO_DP_RANKS)
    assert sums["sglang:num_queue_reqs"] == 100.0
    assert sums["process_cpu_seconds_total"] == 12.5
    assert "sglang:infinite" not in sums
