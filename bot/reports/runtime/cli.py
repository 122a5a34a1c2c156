"""``kimi-ops report [--config FILE] [--host H] [--png FILE] [--json]``: the capacity report
``/kimi report`` posts, from a terminal, against the configured agents.

The figures are stored as a sample and the chart is drawn from the samples the store holds (the
bot's sampling job fills it); a recommendation is recorded as a proposal, as in chat, so
``kimi-ops chat apply N`` applies it. Exit 0 when every host answered, 1 when one did not, 2 for
bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.chat.agent_client import revisions_source
from bot.chat.config import load_chat_settings
from bot.chat.core import build_core
from bot.chat.replies import HostReportView, ProblemReply, ReportReply, SilentFront
from bot.chat.report_commands import capacity_report
from bot.chat.store_audit import StoreAudit
from bot.errors import InputError
from bot.reports import load_report_settings
from bot.reports.runtime.wiring import attach_reports
from bot.settings import find_config_path, load_config
from bot.store import Store, StoreSettings, upgrade_to_head
from bot.terminal.report_wording import report_reply_lines

__all__ = ["configure", "report_json", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (default: $KIMI_OPS_CONFIG)")
    parser.add_argument("--host", metavar="H", help="one configured host (default: every host)")
    parser.add_argument(
        "--png", metavar="FILE", type=Path, help="write the host's trend chart (needs --host)"
    )
    parser.add_argument("--json", action="store_true", help="the report as JSON")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _view_json(view: HostReportView) -> dict[str, Any]:
    body: dict[str, Any] = _plain(dataclasses.asdict(view.report))
    body["answered"] = view.report.answered
    body["chart"] = (
        None
        if view.chart is None
        else {"filename": view.chart.filename, "alt": view.chart.alt, "size_px": view.chart.size_px}
    )
    body["recommendation"] = (
        None
        if view.proposal is None
        else {
            "proposal": view.proposal.id,
            "setting": view.proposal.plan.setting,
            "evidence": view.evidence,
            "reason": view.proposal.plan.reason,
        }
    )
    return body


def report_json(reply: ReportReply) -> list[dict[str, Any]]:
    """One object per host: the report's figures, its chart's name and alt text, the advice."""
    return [_view_json(view) for view in reply.hosts]


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    if args.png is not None and args.host is None:
        raise InputError("--png writes one host's chart: name the host with --host H")
    path = find_config_path(args.config, env)
    config = load_config(path)
    settings = load_chat_settings(config, path)
    report_settings = load_report_settings(config)
    store_settings = StoreSettings.from_config(config, env)
    url = store_settings.engine_url()
    upgrade_to_head(url)
    with Store(url, busy_timeout_s=store_settings.busy_timeout_s) as store:
        audit = StoreAudit(store, revisions_source(settings, env))
        core = build_core(settings, audit, SilentFront(), env, channel="kimi-ops report")
        try:
            attach_reports(core, store, report_settings)
            reply = capacity_report(core.context, args.host)
        finally:
            core.close()
    if isinstance(reply, ProblemReply):  # pragma: no cover - the reporter is attached above
        print(f"error: {reply.text}", file=sys.stderr)
        return 1
    if args.png is not None:
        chart = reply.hosts[0].chart
        if chart is None:
            print(f"kimi-ops report: no chart: {reply.hosts[0].report.problem}", file=sys.stderr)
        else:
            args.png.write_bytes(chart.png)
    if args.json:
        print(json.dumps(report_json(reply), indent=2))
    else:
        print("\n".join(report_reply_lines(reply)))
    return 0 if all(view.report.answered for view in reply.hosts) else 1
