"""``kimi-ops report [--config FILE] [--host H] [--png FILE] [--json]``: the capacity report
``/kimi report`` posts, from a terminal, against the configured agents.

The figures are stored as a sample and the chart is drawn from the samples the store holds (the
bot's sampling job fills it); a recommendation is recorded as a proposal, as in chat, so
``kimi-ops chat apply N`` applies it. ``--png FILE`` writes the host's chart there; without it no
file is written and the text says so. Exit 0 when every host answered, 1 when one did not (or the
chart could not be written), 2 for bad arguments (an unknown host, ``--png`` in a directory that
does not exist), each error one line.
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


def _view_json(view: HostReportView, written: Mapping[str, Path]) -> dict[str, Any]:
    body: dict[str, Any] = _plain(dataclasses.asdict(view.report))
    body["answered"] = view.report.answered
    path = written.get(view.report.host)
    body["chart"] = (
        None
        if view.chart is None
        else {
            "filename": view.chart.filename,
            "written_to": None if path is None else str(path),
            "alt": view.chart.alt,
            "size_px": view.chart.size_px,
        }
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


def report_json(
    reply: ReportReply, written: Mapping[str, Path] | None = None
) -> list[dict[str, Any]]:
    """One object per host: the report's figures, its chart's name, where it was written (None:
    nowhere) and alt text, the advice."""
    return [_view_json(view, written or {}) for view in reply.hosts]


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    if args.png is not None and args.host is None:
        raise InputError("--png writes one host's chart: name the host with --host H")
    if args.png is not None and not args.png.parent.is_dir():
        raise InputError(
            f"--png {args.png}: the directory {args.png.parent} does not exist; "
            "name a file in an existing directory"
        )
    path = find_config_path(args.config, env)
    config = load_config(path)
    settings = load_chat_settings(config, path)
    if args.host is not None and args.host not in settings.host_names:
        raise InputError(
            f"--host {args.host}: no such host in {path} "
            f"(configured: {', '.join(settings.host_names)})"
        )
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
    written: dict[str, Path] = {}
    failed = False
    if args.png is not None:
        view = reply.hosts[0]
        if view.chart is None:
            print(
                f"kimi-ops report: no chart of {view.report.host}: no samples stored",
                file=sys.stderr,
            )
            failed = True
        else:
            try:
                args.png.write_bytes(view.chart.png)
            except OSError as exc:
                print(f"kimi-ops report: cannot write {args.png}: {exc.strerror}", file=sys.stderr)
                failed = True
            else:
                written[view.report.host] = args.png
    if args.json:
        print(json.dumps(report_json(reply, written), indent=2))
    else:
        print("\n".join(report_reply_lines(reply, written)))
    answered = all(view.report.answered for view in reply.hosts)
    return 0 if answered and not failed else 1
