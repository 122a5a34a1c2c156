"""``kimi-ops db``: bring the database schema up to date, show it, or take it back.

kimi-ops db upgrade            # to the newest revision (what the bot does on start)
kimi-ops db current            # e.g. "0001 (head)"
kimi-ops db downgrade base --yes
"""

from __future__ import annotations

import argparse

from bot.db import make_engine, safe_url
from bot.errors import InputError
from bot.store._cli_common import add_database_options, settings_from_args
from bot.store.migrate import current_revision, downgrade, head_revision, upgrade

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_database_options(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("upgrade", help="migrate up (default: to the newest revision)")
    up.add_argument("revision", nargs="?", default="head", help="target revision (default: head)")
    actions.add_parser("current", help="print the revision the database is at")
    down = actions.add_parser("downgrade", help="migrate down to REVISION ('base': drop all)")
    down.add_argument("revision", help="target revision, or 'base'")
    down.add_argument(
        "--yes",
        action="store_true",
        help="confirm: a downgrade drops tables and the audit they hold (back up first)",
    )


def _describe(revision: str | None) -> str:
    if revision is None:
        return "none (empty database)"
    return f"{revision} (head)" if revision == head_revision() else revision


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    engine = make_engine(settings.engine_url(), settings.busy_timeout_s)
    where = safe_url(settings.url)
    try:
        if args.action == "upgrade":
            print(f"{where}: schema at {_describe(upgrade(engine, args.revision))}")
        elif args.action == "downgrade":
            if not args.yes:
                raise InputError(
                    f"downgrading {where} to {args.revision!r} can drop recorded history; "
                    "back the database up, then run again with --yes"
                )
            print(f"{where}: schema at {_describe(downgrade(engine, args.revision))}")
        else:
            current = current_revision(engine)
            line = _describe(current)
            if current != head_revision():
                line += f"; newest is {head_revision()}: run `kimi-ops db upgrade`"
            print(line)
    finally:
        engine.dispose()
    return 0
