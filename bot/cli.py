"""The ``kimi-ops`` command: one sub-command per concept, each defined in its own module.

Each sub-command module exposes ``configure(parser)`` (adds its arguments) and
``run(args) -> int`` (the exit code). Modules are imported only when their command runs, so
``kimi-ops plan`` never pays for FastAPI or SQLAlchemy.

Exit codes shared by every command: 0 success, 2 bad arguments or input, 1 anything else that
went wrong; a command may define more (``plan`` exits 3 when the plan is refused).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from bot import DISTRIBUTION, __version__
from bot.errors import InputError, KimiOpsError

__all__ = ["COMMANDS", "build_parser", "main"]

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("bot.planner.cli", "size a HiCache change and check that it fits the host"),
    "startup-report": ("bot.startup.cli", "timeline, figures and failure of one SGLang start"),
    "agent": ("bot.agent.cli", "run the agent on a GPU host"),
    "db": ("bot.store.cli", "database schema: upgrade, current, downgrade"),
    "history": ("bot.store.history_cli", "the audit of applied configurations"),
    "chat": ("bot.terminal.cli", "the bot's commands from a terminal (status, resize, apply ...)"),
    "bot": ("bot.slack.cli", "the Slack app: /kimi over Socket Mode, or HTTP with --http"),
    "demo": ("bot.demo.cli", "the bot on a simulated host: a scripted session, then a prompt"),
    "report": ("bot.reports.runtime.cli", "capacity report of the configured hosts, and a chart"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kimi-ops",
        description="Plan, apply, watch and audit SGLang HiCache resizes.",
    )
    parser.add_argument("--version", action="version", version=f"{DISTRIBUTION} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args_list or args_list[0] not in COMMANDS:
        # Let argparse print the usage and the list of commands (exit 2), the help or the
        # version (exit 0).
        parser.parse_args(args_list)
        return 2
    name = args_list[0]
    module = importlib.import_module(COMMANDS[name][0])
    sub_parser = argparse.ArgumentParser(prog=f"kimi-ops {name}", description=COMMANDS[name][1])
    module.configure(sub_parser)
    args = sub_parser.parse_args(args_list[1:])
    try:
        code: int = module.run(args)
    except InputError as exc:
        print(f"kimi-ops {name}: {exc}", file=sys.stderr)
        return 2
    except KimiOpsError as exc:
        print(f"kimi-ops {name}: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
