"""The report model: Prometheus figures, a report from an agent's answers, the stored sample."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from bot.agent_json import AgentOperation, AgentStatus
from bot.chat.replies import HostReportView, ReportReply
from bot.prometheus import prometheus_samples, server_metrics
from bot.reports import ServerMetrics, sample_of
from bot.reports.model import HostReport
from bot.reports.runtime import report_from
from bot.slack import report_messages
from bot.terminal.report_wording import report_reply_lines
from tests.reports._fixtures import GB, T0, SetClock, status_json

# What SGLang 0.5.9 serves on /metrics with --enable-metrics and two data-parallel ranks.
TWO_RANKS = """\
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="kimi",dp_rank="0"} 0.96
sglang:token_usage{model_name="kimi",dp_rank="1"} 0.98
sglang:num_running_reqs{model_name="kimi",dp_rank="0"} 25.0
sglang:num_running_reqs{model_name="kimi",dp_rank="1"} 25.0
sglang:num_queue_reqs{model_name="kimi",dp_rank="0"} 30.0
sglang:num_queue_reqs{model_name="kimi",dp_rank="1"} 50.0
sglang:cache_hit_rate{model_name="kimi",dp_rank="0"} 0.125
sglang:cache_hit_rate{model_name="kimi",dp_rank="1"} nan
sglang:gen_throughput{model_name="kimi"} not-a-number
"""


def _operation(op_id: int, state: str, minutes: int, setting: str | None) -> AgentOperation:
    plan = None
    if setting is not None:
        plan = {"request": {"ratio": 4}, "verdict": "fits", "reason": "fits", "ranks": 8,
                "setting": setting}  # fmt: skip
    body = {"id": op_id, "kind": "resize", "state": state, "actor": "ana",
            "created_at": (T0 + timedelta(minutes=minutes)).isoformat(),
            "finished_at": (T0 + timedelta(minutes=minutes + 9)).isoformat(),
            "plan": plan, "revision": op_id + 10}  # fmt: skip
    return AgentOperation.from_json(body)


def test_gauges_of_two_ranks_average_fractions_and_add_counts() -> None:
    """Two DP ranks at 96% and 98% read 97%; their queues (30 + 50) add up; NaN is skipped."""
    metrics = server_metrics(prometheus_samples(TWO_RANKS))
    assert metrics == ServerMetrics(
        token_usage=pytest.approx((0.96 + 0.98) / 2),
        running_requests=50,
        queued_requests=80,
        cache_hit_rate=0.125,
    )


def test_a_server_without_the_gauges_has_no_metrics() -> None:
    """Text without any gauge kimi-ops reads gives None, not zeros."""
    assert server_metrics(prometheus_samples("# nothing\nprocess_cpu_seconds 4.0\n")) is None


def test_a_report_carries_the_agents_figures_and_the_ready_configs() -> None:
    """RAM held by HiCache is GB per rank x ranks; the revision and the chart's changes come from
    the operations that became ready, the last operation is the newest."""
    status = AgentStatus.from_json(status_json())
    operations = (
        _operation(3, "failed", 40, "ratio 8"),
        _operation(2, "ready", 20, "ratio 4"),
        _operation(1, "ready", 0, "ratio 2"),
    )
    report = report_from(status, operations, None, "kimi-01", SetClock())
    assert report.hicache_gb == pytest.approx(22.39 * 8)
    assert report.revision == 12
    assert [c.label for c in report.changes] == ["ratio 2", "ratio 4"]
    assert report.changes[1].at == T0 + timedelta(minutes=29)
    assert report.last_operation is not None
    assert report.last_operation.id == 3
    assert [g.used_gb for g in report.gpus] == [94.51, 94.49]


def test_the_sample_of_a_report_keeps_bytes_and_fractions() -> None:
    """GB become bytes (1e9), metrics go to their columns; a silent host gives no sample."""
    status = AgentStatus.from_json(status_json())
    metrics = ServerMetrics(token_usage=0.97, running_requests=50, queued_requests=80)
    sample = sample_of(report_from(status, (), metrics, "kimi-01", SetClock()))
    assert sample is not None
    assert sample.ram_available_bytes == round(237.9 * GB)
    assert sample.hicache_host_bytes == round(22.39 * 8 * GB)
    assert (sample.token_usage, sample.queued_requests) == (0.97, 80)
    assert sample.gpus[0]["used_bytes"] == round(94.51 * GB)
    assert sample_of(HostReport(host="kimi-02", at=T0, problem="connection refused")) is None


def _memory_notice(seq: int, at: datetime, headroom_gb: float) -> dict[str, Any]:
    return {"seq": seq, "at": at.isoformat(), "where": "host", "headroom_gb": headroom_gb,
            "available_gb": headroom_gb, "cgroup_limit_gb": None, "floor_gb": 10.74,
            "message": f"after ready: host RAM available fell to {headroom_gb} GB"}  # fmt: skip


def test_a_report_lists_the_last_days_memory_notices_and_the_lines_show_them() -> None:
    """Notices of the last 24 h are in the report (an older one is not), with whether the
    headroom is under the floor now; the terminal and Slack reports show each with its time."""
    old = _memory_notice(1, T0 - timedelta(hours=25), 5.0)
    recent = _memory_notice(2, T0 - timedelta(hours=2), 8.2)
    status = AgentStatus.from_json(
        status_json(memory_watch={"below_floor": True, "notices": [old, recent]})
    )
    report = report_from(status, (), None, "kimi-01", SetClock())
    assert [n.seq for n in report.memory_notices] == [2]
    assert report.memory_notices[0].headroom_gb == 8.2
    assert report.memory_below_floor
    lines = report_reply_lines(ReportReply((HostReportView(report),)))
    assert "  memory    04:00 UTC after ready: host RAM available fell to 8.2 GB" in lines
    assert "  memory    the server's headroom is under the guard's floor now" in lines
    slack = json.dumps(report_messages.report(ReportReply((HostReportView(report),))).blocks)
    assert ":warning: Memory at 04:00 UTC: after ready: host RAM available fell to 8.2 GB" in slack
    quiet = report_from(AgentStatus.from_json(status_json()), (), None, "kimi-01", SetClock())
    assert (quiet.memory_notices, quiet.memory_below_floor) == ((), False)
