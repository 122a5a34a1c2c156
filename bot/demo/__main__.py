"""``python -m bot.demo``: the same as ``kimi-ops demo``."""

from __future__ import annotations

import sys

from bot.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["demo", *sys.argv[1:]]))
