"""Placeholder until the demo lands: say what it will do, and succeed."""

from __future__ import annotations

PLAN = """\
kimi-ops demo (coming): on this machine, with no Slack and no GPU, it will
  1. migrate a local SQLite store,
  2. start the SGLang simulator on a 449 GB / 8-GPU host profile (the field notes' host),
  3. start an agent with the process backend against it,
  4. drive the bot from the terminal: status, `resize ratio 4`, apply, live progress, history,
printing what Slack would show.
Today you can already try:  .venv/bin/kimi-ops plan --ratio 4 --kv-gib 10.42 --device-tokens \
160000 --ranks 8 --available-gb 396 --held-gb 200"""


def main() -> int:
    print(PLAN)
    return 0


raise SystemExit(main())
