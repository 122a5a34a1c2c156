"""The terminal's layout of capacity reports and schedules."""

from __future__ import annotations

from datetime import timedelta

from bot.chat.replies import HostReportView, ReportReply, ReportSchedulesReply
from bot.reports import GpuMemory, HostReport, ServerMetrics
from bot.store import ReportSchedule
from bot.terminal.report_wording import report_reply_lines
from tests.reports._fixtures import T0

LIVE = HostReport(
    host="kimi-01", at=T0, server_state="running", version="0.5.9", uptime_s=3725,
    setting="ratio 2 x device pool", revision=3, ram_total_gb=449.0, ram_available_gb=237.9,
    hicache_gb=179.12, ranks=8, gpus=(GpuMemory(0, 94.51, 103.08),), device_tokens=159274,
    host_tokens_per_rank=318549,
    metrics=ServerMetrics(token_usage=0.97, running_requests=50, queued_requests=80),
)  # fmt: skip


def test_a_live_host_shows_each_figure_once_with_its_unit() -> None:
    """Time once with its zone, the setting and revision, RAM, tokens, load, GPUs, no advice."""
    lines = report_reply_lines(ReportReply((HostReportView(LIVE),)))
    assert lines[0] == (
        "kimi-01: capacity at 06:00 UTC, server running, SGLang 0.5.9, up 1 h 02 min"
    )
    assert "ratio 2 x device pool (revision 3)" in lines[1]
    assert "449.0 GB total, 237.9 GB available, 179.1 GB held by HiCache" in lines[2]
    assert "device 159,274 tokens; host 318,549 tokens/rank" in lines[3]
    assert "token usage 97%, 50 running, 80 queued" in lines[4]
    assert "0: 94.5/103.1 GB" in lines[5]
    assert lines[-1].endswith("nothing in the samples calls for a change")


def test_a_silent_host_is_one_line_with_its_problem() -> None:
    """An unreachable host: its name, the time and the agent's problem."""
    silent = HostReport(host="kimi-02", at=T0, problem="connection refused")
    assert report_reply_lines(ReportReply((HostReportView(silent),))) == [
        "kimi-02: agent unreachable at 06:00 UTC (connection refused)"
    ]


def test_a_report_s_times_are_in_the_configured_zone() -> None:
    """With [reports] timezone Europe/Paris, 06:00 UTC reads 07:00 Europe/Paris (CET, UTC+1 in
    November), for a live host and a silent one. Failed before the fix: UTC whatever the zone."""
    silent = HostReport(host="kimi-02", at=T0, problem="connection refused")
    reply = ReportReply((HostReportView(LIVE), HostReportView(silent)), timezone="Europe/Paris")
    lines = report_reply_lines(reply)
    assert lines[0].startswith("kimi-01: capacity at 07:00 Europe/Paris, server running")
    assert "kimi-02: agent unreachable at 07:00 Europe/Paris (connection refused)" in lines
    assert not [line for line in lines if "UTC" in line]


def test_schedules_are_listed_with_cadence_zone_and_next_run() -> None:
    """Each schedule: id, cadence as typed, time zone, channel, creator and next run."""
    schedule = ReportSchedule(
        id=4, channel="C0OPS", host=None, cadence="every 21600s",
        next_run_at=T0 + timedelta(hours=6), created_by="ana", created_at=T0, enabled=True,
    )  # fmt: skip
    reply = ReportSchedulesReply((schedule,), ("every 6h",), "UTC")
    assert report_reply_lines(reply) == [
        "#4 every 6h (UTC) to C0OPS, by ana; next 2026-11-30 12:00 UTC"
    ]
    assert report_reply_lines(ReportSchedulesReply((), (), "UTC")) == [
        "no capacity reports are scheduled"
    ]
