"""``kimi-ops chat [--config FILE] [--as USER] [COMMAND ...]``: the bot from a terminal.

With a command, runs it as USER (default ``$USER``) and exits: 0 done or ready, 1 failed or
rolled back (or an agent did not answer), 3 refused, 2 a usage error. ``apply``, ``restart`` and
``rollback`` draw the progress until the operation ends; a fleet's rollout is drawn until it
ends too (0 when every replica changed). Without a command, a ``kimi> `` prompt
with readline history. The core is the Slack bot's: the same text and figures.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from bot.chat.agent_client import revisions_source
from bot.chat.config import load_chat_settings
from bot.chat.core import ChatCore, build_core
from bot.chat.fleet_commands import attach_fleets
from bot.chat.policy import Actor
from bot.chat.replies import (
    FleetRefusalReply,
    OperationReply,
    ProblemReply,
    ProposalReply,
    RefusalReply,
    RejoinReply,
    Reply,
    RolloutReply,
    UsageReply,
)
from bot.chat.store_audit import StoreAudit
from bot.errors import InputError
from bot.fleet import load_fleets
from bot.settings import find_config_path, load_config
from bot.store import Store, StoreSettings, upgrade_to_head
from bot.terminal.front import TerminalFrontEnd
from bot.terminal.wording import acting_line, stopped_watching_line
from bot.vocab import (
    OperationState,
    RolloutState,
)

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "configure", "exit_code", "run"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3
PROMPT = "kimi> "
_HISTORY_FILE = ".kimi-ops-chat-history"
_MAX_USER = 64


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (default: $KIMI_OPS_CONFIG)")
    parser.add_argument("--as", dest="as_user", metavar="USER", help="act as USER (default: $USER)")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="one command, e.g. resize ratio 4 (none: prompt)"
    )


def _actor(as_user: str | None, environ: Mapping[str, str]) -> Actor:
    name = as_user if as_user is not None else environ.get("USER", "")
    if not name or len(name) > _MAX_USER or any(c.isspace() or not c.isprintable() for c in name):
        raise InputError(
            f"user {name[:_MAX_USER]!r} is not a usable name: give --as USER (1 to "
            f"{_MAX_USER} characters, no spaces)"
        )
    return Actor(name)


def exit_code(reply: Reply, final_state: OperationState | None = None) -> int:
    """The exit status of one command, from its reply (and the operation's end, if it ran)."""
    if isinstance(reply, UsageReply):
        return EXIT_USAGE
    if isinstance(reply, RefusalReply):
        return EXIT_REFUSED
    if isinstance(reply, ProposalReply):
        return EXIT_OK if reply.plan.fits else EXIT_REFUSED
    if isinstance(reply, ProblemReply):
        return EXIT_FAILED
    if isinstance(reply, OperationReply):
        return EXIT_OK if final_state is OperationState.READY else EXIT_FAILED
    if isinstance(reply, FleetRefusalReply):
        return EXIT_REFUSED
    if isinstance(reply, RejoinReply):
        return EXIT_REFUSED if any(r.refused for r in reply.outcomes) else EXIT_OK
    return EXIT_OK


def _wait_rollout(core: ChatCore, reply: RolloutReply) -> int:
    """A rollout started from a one-shot command is followed to its end (Ctrl-C stops the
    process only: the store keeps it running for 'resume fleet')."""
    desk = core.context.fleets
    assert desk is not None  # a RolloutReply comes from the fleet desk
    try:
        final = desk.wait(reply.view.id)
    except KeyboardInterrupt:
        return EXIT_FAILED
    return EXIT_OK if final is not None and final.state is RolloutState.DONE else EXIT_FAILED


def run_command(core: ChatCore, front: TerminalFrontEnd, text: str, actor: Actor) -> int:
    """Carry out one command; an operation is watched to its end (Ctrl-C stops watching only)."""
    reply = core.handle(text, actor)
    if isinstance(reply, RolloutReply):
        return _wait_rollout(core, reply)
    if not isinstance(reply, OperationReply):
        return exit_code(reply)
    try:
        final = core.wait(reply.watch)
    except KeyboardInterrupt:
        print(stopped_watching_line(reply.operation.id))
        return EXIT_FAILED
    if final is None:
        return EXIT_FAILED
    front.final(reply.watch, final)
    return exit_code(reply, final.state)


def acting_as(text: str, actor: Actor) -> tuple[Actor, str | None]:
    """Who runs ``text`` at the prompt, and the command: ``as ben resize ratio 4`` runs one
    command as ben; ``as ben`` alone (command None) makes ben the prompt's person from then on;
    anything else runs as ``actor``."""
    words = text.split(maxsplit=2)
    if len(words) >= 2 and words[0].lower() == "as":
        return Actor(words[1]), (words[2] if len(words) == 3 else None)
    return actor, text.strip()


def prompt_loop(core: ChatCore, front: TerminalFrontEnd, actor: Actor, home: Path) -> int:
    """``kimi> `` until end of input or ``quit``; readline keeps the history across runs.
    ``as NAME [COMMAND]`` acts as another person (:func:`acting_as`)."""
    history = home / _HISTORY_FILE
    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        readline = None  # type: ignore[assignment]
    if readline is not None and history.exists():
        readline.read_history_file(history)
    core.resume()
    try:
        while True:
            try:
                text = input(PROMPT)
            except KeyboardInterrupt:
                print()
                continue
            except EOFError:
                print()
                return EXIT_OK
            if text.strip().lower() in ("quit", "exit"):
                return EXIT_OK
            who, command = acting_as(text, actor)
            if command is None:
                actor = who
                print(acting_line(who.id))
            elif command:
                run_command(core, front, command, who)
    finally:
        if readline is not None:
            readline.write_history_file(history)


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    path = find_config_path(args.config, env)
    config = load_config(path)
    settings = load_chat_settings(config, path)
    store_settings = StoreSettings.from_config(config, env)
    actor = _actor(args.as_user, env)
    url = store_settings.engine_url()
    upgrade_to_head(url)
    front = TerminalFrontEnd(sys.stdout, tty=sys.stdout.isatty())
    with Store(url, busy_timeout_s=store_settings.busy_timeout_s) as store:
        audit = StoreAudit(store, revisions_source(settings, env))
        core = build_core(settings, audit, front, env)
        fleets = load_fleets(config, settings.host_names)
        if fleets:
            attach_fleets(core.context, store, fleets, front)
        try:
            if args.command:
                return run_command(core, front, " ".join(args.command), actor)
            return prompt_loop(core, front, actor, Path(env.get("HOME") or Path.home()))
        finally:
            core.close()
