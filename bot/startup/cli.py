"""``kimi-ops startup-report LOGFILE [--json]``: the timeline, figures and failure of one start.

Exit codes: 0 the start became ready (and the log names no failure), 1 it failed or did not
finish, 2 the file is missing or unreadable (``LogInputError``, reported by ``bot.cli``).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from bot.startup._file import read_startup_report
from bot.startup.report import NO_RANK, PoolFigures, StartupReport

__all__ = ["configure", "render_text", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the command's arguments."""
    parser.add_argument("logfile", metavar="LOGFILE", help="the SGLang server's log file")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the text report"
    )


def run(args: argparse.Namespace) -> int:
    """Print the report of the log's last start; 0 when it became ready, else 1."""
    report = read_startup_report(args.logfile)
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True))
    else:
        sys.stdout.write(render_text(report, args.logfile))
    return 0 if report.ready and report.failure is None else 1


def render_text(report: StartupReport, source: str) -> str:
    """The human-readable report: verdict, timeline table, figures, failure lines."""
    out: list[str] = [f"SGLang start in {source}: {_verdict(report)}"]
    if report.dialect is not None:
        out.append(f"log texts of SGLang {report.dialect.value}")
    out.append("")
    if report.phases:
        out.append(f"{'phase':<13} {'start':<19}  {'end':<19}  {'duration':>9}")
        for span in report.phases:
            out.append(
                f"{span.phase.value:<13} {_time(span.start):<19}  {_time(span.end):<19}  "
                f"{_duration(span.seconds):>9}"
            )
        out.extend(_untimed_stretches(report))
    else:
        out.append("no startup line found in this log")
    out.append("")
    out.extend(_figures(report))
    if report.failure is not None:
        out.append("")
        out.append(f"failure: {report.failure.kind.value}")
        out.extend(f"  {line}" for line in report.failure.lines)
    return "\n".join(out) + "\n"


def _untimed_stretches(report: StartupReport) -> list[str]:
    """Phases whose bounds the log does not date, as one stretch between two dated bounds:
    "host_pool to ready took 2:37 in all: the lines that begin http and warmup carry no time"
    (0.5.9's uvicorn lines; the silent pin is in that stretch)."""
    lines: list[str] = []
    spans = report.phases
    index = 0
    while index < len(spans):
        span = spans[index]
        if span.start is None or span.end is not None:
            index += 1
            continue
        last = index + 1
        while last < len(spans) and spans[last].start is None:
            last += 1
        inside = [s.phase.value for s in spans[index + 1 : last]]
        if last < len(spans):
            end = spans[last]
            seconds = (end.start - span.start).total_seconds() if end.start else None
            lines.append(
                f"{span.phase.value} to {end.phase.value} took {_duration(seconds)} in all: "
                f"the lines that begin {' and '.join(inside)} carry no time"
            )
        index = last
    return lines


def _verdict(report: StartupReport) -> str:
    if report.failure is not None:
        return f"FAILED ({report.failure.kind.value})"
    if report.ready:
        return f"ready at {_time(report.ready_at)} after {_duration(report.startup_seconds)}"
    last = report.phases[-1].phase.value if report.phases else "nothing"
    return f"not ready (last phase: {last})"


def _figures(report: StartupReport) -> list[str]:
    lines: list[str] = []
    if report.ranks == (NO_RANK,):
        lines.append("ranks: 1 (no rank prefix: a single-process server)")
    elif report.ranks:
        lines.append(f"ranks: {len(report.ranks)} ({', '.join(report.ranks)})")
    if report.shards is not None:
        lines.append(f"weights: {report.shards[0]}/{report.shards[1]} shards loaded")
    if report.cuda_graphs is not None:
        lines.append(f"CUDA graphs: {report.cuda_graphs[0]}/{report.cuda_graphs[1]} captured")
    if report.device_tokens is not None:
        lines.append(f"device KV pool: {report.device_tokens:,} tokens (max_total_num_tokens)")
    if report.kv_gib_per_rank:
        lines.append("device KV GiB per rank: " + _per_rank(report.kv_gib_per_rank))
    if report.device_pool_undecided is not None:
        lines.append(f"device KV pool undecided: {report.device_pool_undecided}")
    if len(report.pools) > 1:
        lines.append("device pools of a rank: " + "; ".join(_pool(p) for p in report.pools))
    if report.sliding_window is not None:
        swa = report.sliding_window
        size = "" if swa.kv_gib is None else f", {swa.kv_gib:.2f} GiB in all"
        lines.append(
            f"sliding-window model: full-attention pool {swa.full_tokens:,} tokens, "
            f"sliding-window pool {swa.swa_tokens:,} tokens{size} (each gets a host pool)"
        )
    if report.draft_pool is not None:
        draft = report.draft_pool
        lines.append(
            f"draft pool (beside the device pool, not counted in it): {draft.tokens or 0:,} "
            f"tokens, {draft.kv_gib:.2f} GiB"
        )
    if report.host_extra_gb_per_rank:
        lines.append("host KV pool GB per rank: " + _per_rank(report.host_gb_per_rank))
        names = sorted({n for extras in report.host_extra_gb_per_rank.values() for n in extras})
        for name in names:
            values = {r: e[name] for r, e in report.host_extra_gb_per_rank.items() if name in e}
            lines.append(f"host {name} GB per rank: " + _per_rank(values))
        lines.append(
            "host RAM GB per rank (all host pools): "
            + _per_rank(report.host_total_gb_per_rank)
            + f"; total {report.host_gb_total:.2f} GB"
        )
    elif report.host_gb_per_rank:
        lines.append(
            "host pool GB per rank: "
            + _per_rank(report.host_gb_per_rank)
            + f"; total {report.host_gb_total:.2f} GB"
        )
    if report.host_tokens_per_rank:
        lines.append("host pool tokens per rank: " + _per_rank(report.host_tokens_per_rank))
    if report.sglang_headroom is not None:
        seen = report.sglang_headroom
        cgroup = f"{seen.cgroup_gib:.1f} GiB" if seen.cgroup_limited else "no limit"
        line = (
            f"memory headroom SGLang saw: host {seen.host_gib:.1f} GiB, cgroup {cgroup}; "
            f"it sized within {seen.headroom_gib:.1f} GiB "
            f"({seen.headroom_gib * 1024**3 / 1e9:.1f} GB)"
        )
        if report.host_gb_total:
            line += f", the host pools took {report.host_gb_total:.2f} GB"
        lines.append(line)
    return lines


def _pool(pool: PoolFigures) -> str:
    tokens = "? tokens" if pool.tokens is None else f"{pool.tokens:,} tokens"
    label = "" if pool.label is None else f" '{pool.label}'"
    return f"{pool.kind.value}{label} {tokens}, {pool.kv_gib:.2f} GiB"


def _per_rank(values: dict[str, float] | dict[str, int]) -> str:
    distinct = set(values.values())
    if len(distinct) == 1 and len(values) > 1:
        return f"{_number(next(iter(distinct)))} on each of {len(values)} ranks"
    return ", ".join(f"{rank or '(no rank)'} {_number(v)}" for rank, v in values.items())


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
