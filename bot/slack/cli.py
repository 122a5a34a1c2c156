"""``kimi-ops bot [--config FILE] [--http --port N]``: the Slack app.

Socket Mode by default (``SLACK_BOT_TOKEN``, ``SLACK_APP_TOKEN``): the bot connects out to Slack.
With ``--http`` it serves ``/slack/events`` on ``--port`` (``SLACK_BOT_TOKEN``,
``SLACK_SIGNING_SECRET``); port 0 picks a free one, logged as
``kimi-ops bot: listening on http://0.0.0.0:PORT/slack/events``. A missing or malformed token
is one line naming the variable, exit 2; so is a token Slack refuses, or a Slack that cannot be
reached, at start (one line naming the cause and what to check, never a traceback). On start
the bot resumes watching every operation the store holds as unfinished, editing the same
messages.

It also runs the database's one report scheduler (capacity samples and scheduled reports),
unless ``--no-scheduler``: a second bot on the same database without it is refused at start, one
line naming the process that holds the lock, exit 2. SIGTERM stops the scheduler and gives its
lock up.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from urllib.error import URLError

from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk.errors import SlackApiError

from bot.chat.config import load_chat_settings
from bot.errors import ConfigError, SchedulerLocked, SlackStartError
from bot.fleet import load_fleets
from bot.reports import load_report_settings
from bot.reports.runtime import add_scheduler_flag
from bot.settings import find_config_path, load_config
from bot.slack.config import load_slack_settings, read_tokens
from bot.slack.http import HttpServer, bind
from bot.slack.service import build_bot
from bot.store import Store, StoreSettings, upgrade_to_head

__all__ = ["configure", "run"]

EXIT_USAGE = 2
log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (default: $KIMI_OPS_CONFIG)")
    parser.add_argument(
        "--http", action="store_true", help="serve /slack/events instead of Socket Mode"
    )
    parser.add_argument("--port", type=int, default=3000, help="HTTP mode's port (0: any free)")
    parser.add_argument("--listen", default="0.0.0.0", help="HTTP mode's address")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    add_scheduler_flag(parser)


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    try:
        tokens = read_tokens(env, http=args.http)
    except ConfigError as exc:
        print(f"kimi-ops bot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.http and not 0 <= args.port <= 65535:
        print(f"kimi-ops bot: --port {args.port} is not a TCP port (0 to 65535)", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    path = find_config_path(args.config, env)
    config = load_config(path)
    chat = load_chat_settings(config, path)
    slack = load_slack_settings(config, env)
    reports = load_report_settings(config)
    fleets = load_fleets(config, chat.host_names)
    store_settings = StoreSettings.from_config(config, env)
    url = store_settings.engine_url()
    upgrade_to_head(url)
    sock = bind(args.listen, args.port) if args.http else None
    with Store(url, busy_timeout_s=store_settings.busy_timeout_s) as store:
        try:
            bot = build_bot(chat, slack, tokens, store, env, reports=reports, fleets=fleets)
        except SlackStartError as exc:
            print(f"kimi-ops bot: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            if not args.no_scheduler:
                try:
                    bot.start_scheduler()
                except SchedulerLocked as exc:
                    print(f"kimi-ops bot: {exc}", file=sys.stderr)
                    return EXIT_USAGE
            bot.start()
            if sock is not None:
                server = HttpServer(bot.app, sock)
                # uvicorn only takes SIGTERM over once serving: one sent right after the ready
                # line would otherwise kill the process before the bot closes.
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, lambda *_: server.request_stop())
                print(f"kimi-ops bot: listening on {server.url}", file=sys.stderr, flush=True)
                server.run()
            else:
                assert tokens.app is not None
                print("kimi-ops bot: connecting in Socket Mode", file=sys.stderr, flush=True)
                try:
                    _serve_socket_mode(SocketModeHandler(bot.app, app_token=tokens.app.reveal()))
                except SlackStartError as exc:
                    print(f"kimi-ops bot: {exc}", file=sys.stderr)
                    return EXIT_USAGE
        finally:
            bot.close()
    return 0


def _serve_socket_mode(handler: SocketModeHandler) -> None:
    """Connect and stay connected until SIGINT or SIGTERM, then close the connection (the
    handler's own ``start`` would wait forever and die on SIGTERM without closing anything)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        handler.connect()  # type: ignore[no-untyped-call]
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else exc
        raise SlackStartError(
            f"Slack refused to open a Socket Mode connection ({error}); check SLACK_APP_TOKEN: "
            "an app-level token (xapp-...) with connections:write, and Socket Mode turned on"
        ) from exc
    except (URLError, OSError) as exc:
        raise SlackStartError(
            f"cannot reach Slack to open a Socket Mode connection ({getattr(exc, 'reason', exc)}); "
            "check the network or a proxy"
        ) from exc
    try:
        stop.wait()
    finally:
        handler.close()  # type: ignore[no-untyped-call]
