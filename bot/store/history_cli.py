"""``kimi-ops history``: the audit of configurations, newest first.

kimi-ops history --host kimi-01 --limit 5      # a table for people
kimi-ops history --json                        # a list of objects, every field
kimi-ops history --csv > audit.csv             # every column, RFC 4180, for auditors
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bot.cli_args import positive_int
from bot.db import safe_url
from bot.errors import StoreError
from bot.store._cli_common import add_database_options, settings_from_args
from bot.store._render import history_csv, history_json, history_table
from bot.store.store import Store

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_database_options(parser)
    parser.add_argument("--host", help="only this host (default: every host)")
    parser.add_argument(
        "--limit", type=positive_int, default=20, metavar="N", help="at most N rows (default: 20)"
    )
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="a JSON list, every field")
    form.add_argument("--csv", action="store_true", help="CSV with a header and every column")


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    url = settings.engine_url()
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).exists():
        # Reading must not leave an empty database file behind.
        raise StoreError(
            f"no database at {url.database!r} ({safe_url(url)}); run `kimi-ops db upgrade` "
            "there first, or pass --url / --config"
        )
    with Store(url, busy_timeout_s=settings.busy_timeout_s) as store:
        records = store.history(args.host, args.limit)
    if args.csv:
        sys.stdout.write(history_csv(records))
    elif args.json:
        print(history_json(records))
    else:
        print(history_table(records))
    return 0
