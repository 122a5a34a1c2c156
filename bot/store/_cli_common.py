"""Options the store's commands share: which database to use."""

from __future__ import annotations

import argparse
import os

from bot.store.config import DEFAULT_URL, StoreSettings, resolve_settings

__all__ = ["add_database_options", "settings_from_args"]


def add_database_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config file whose [store] url names the database (default: $KIMI_OPS_CONFIG)",
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help=f"SQLAlchemy database URL; wins over the config file (default: {DEFAULT_URL})",
    )


def settings_from_args(args: argparse.Namespace) -> StoreSettings:
    return resolve_settings(args.url, args.config, os.environ)
