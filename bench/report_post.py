"""How long a scheduled capacity report takes to reach Slack, over 1 host and over 20.

The real bot (``build_bot``, its report scheduler started on a migrated SQLite store) posts to
the Web API stand-in; its hosts are agent stand-ins on 127.0.0.1 answering ``GET /v1/status``
after ``--latency-s`` (1.0 s: the agent reads psutil and NVML) and ``GET /v1/operations`` at
once (``reports_parallel.py``'s, for the reason given there). Two schedules exist, one for
``kimi-01`` and one for every host, each in its own channel; each run calls the scheduler's own
job function (``bot.reports.runtime.jobs.report``, what APScheduler calls when one is due) and
measures, from that call, the report message's ``chat.postMessage`` and the last chart's
``files.completeUploadExternal`` arriving at the stand-in (its arrival clock is
``time.monotonic``, as is the start). Medians over ``--runs`` (5) runs.

Prints one JSON line (``bench/_report.py``'s): the figures per host count, ``{"message_s",
"charts_s", "uploads"}``, and one target: the report message over every host within 2x of the
one over one host (the hosts are asked at once; each chart is drawn when it is uploaded in the
thread, after the message, so ``charts_s`` grows with the hosts).

    .venv/bin/python bench/report_post.py [--hosts 20] [--runs 5] [--latency-s 1.0] [--quick]

``--quick``: 3 hosts, one run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _report import BenchLine
from reports_parallel import TOKEN, contextlib_stack

from bot.chat.config import ChatSettings, HostSettings, PolicySettings
from bot.reports import Cadence, ReportSettings
from bot.reports.runtime import jobs
from bot.settings import Secret
from bot.slack import SlackBot, SlackSettings, SlackTokens, build_bot
from bot.store import Store, upgrade_to_head
from bot.testing import RecordedCall, SlackApiStandIn

TOKEN_ENV = "KIMI_AGENT_TOKEN"
APPLIER = "U0BENCH"
DAY_S = 24 * 3600  # the schedules' cadence: never due by itself during the bench
SIGNING_SECRET = "5f1e7c0a9b2d4e6f8a0c1e3b5d7f9a1c"


def _run(
    bot: SlackBot, slack: SlackApiStandIn, scheduler: str, schedule_id: int, channel: str
) -> tuple[float, float, int]:
    """One scheduled run: (seconds to the report message, to the last chart, charts)."""
    started = time.monotonic()
    jobs.report(scheduler, schedule_id)  # returns once posted: the poster is synchronous

    def since(call: RecordedCall) -> bool:
        return call.at >= started and call.ok

    (message,) = [
        c
        for c in slack.calls("chat.postMessage")
        if since(c)
        and c.body.get("channel") == channel
        and str(c.body.get("text", "")).startswith("Capacity report")
    ]
    uploads = [
        c
        for c in slack.calls("files.completeUploadExternal")
        if since(c) and c.body.get("channel_id") == channel
    ]
    last = max((c.at for c in uploads), default=message.at)
    return message.at - started, last - started, len(uploads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--latency-s", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="3 hosts, one run")
    args = parser.parse_args()
    if args.quick:
        args.hosts, args.runs = 3, 1
    line = BenchLine("report_post")
    names = [f"kimi-{n:02d}" for n in range(1, args.hosts + 1)]
    channels = {1: "C0ONEHOST", args.hosts: "C0ALLHOSTS"}
    timings: dict[int, list[tuple[float, float, int]]] = {n: [] for n in channels}
    with (
        SlackApiStandIn() as slack,
        tempfile.TemporaryDirectory() as tmp,
        contextlib_stack(names, args.latency_s) as urls,
    ):
        url = f"sqlite:///{Path(tmp) / 'kimi-ops.db'}"
        upgrade_to_head(url)
        hosts = [HostSettings(n, urls[n], TOKEN_ENV, default=n == names[0]) for n in names]
        chat = ChatSettings(tuple(hosts), PolicySettings(appliers=frozenset({APPLIER})))
        tokens = SlackTokens(bot=Secret(slack.bot_token), signing_secret=Secret(SIGNING_SECRET))
        with Store(url) as store:
            bot = build_bot(
                chat, SlackSettings(api_url=slack.url), tokens, store, {TOKEN_ENV: TOKEN},
                reports=ReportSettings(),
            )  # fmt: skip
            try:
                scheduler = bot.start_scheduler()
                desk = bot.desk
                assert desk is not None
                daily = Cadence(every_s=DAY_S)
                schedules = {
                    1: desk.schedule(channels[1], daily, APPLIER, host=names[0]),
                    args.hosts: desk.schedule(channels[args.hosts], daily, APPLIER),
                }
                for _ in range(args.runs):
                    for hosts, schedule in schedules.items():
                        run = _run(bot, slack, scheduler.name, schedule.id, channels[hosts])
                        timings[hosts].append(run)
            finally:
                bot.close()
    summary = {
        f"hosts_{hosts}": {
            "message_s": round(statistics.median(t[0] for t in runs), 3),
            "charts_s": round(statistics.median(t[1] for t in runs), 3),
            "uploads": min(t[2] for t in runs),
        }
        for hosts, runs in timings.items()
    }
    one, many = summary["hosts_1"]["message_s"], summary[f"hosts_{args.hosts}"]["message_s"]
    line.figures.update(latency_s=args.latency_s, runs=args.runs, hosts=args.hosts, **summary)
    # The hosts are asked at once and the charts drawn after the message is posted: a report
    # over many hosts should reach the channel about as soon as one over one host.
    line.check(f"report message, {args.hosts} hosts vs 1", many / one, at_most=2, unit="x")
    line.emit()


if __name__ == "__main__":
    main()
