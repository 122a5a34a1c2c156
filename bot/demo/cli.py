"""``kimi-ops demo [--script | --interactive] [--web [--port N]] [--time-scale S] [--keep]``:
kimi-ops on one machine.

A simulated SGLang server on a 449 GB, 8-GPU host serving Kimi-K2.5 at TP 8 (the deployment
docs/sglang.md#host-pool-sizing works through), an agent driving it with the process backend
over real HTTP, a migrated SQLite store, and the bot's core with ``kimi-ops chat``'s terminal
front end. The scenario (:mod:`bot.demo._scenario`) is typed into the core as two people;
``--script`` exits 0 only when every step did what it should, ``--interactive`` (the default on
a terminal) then leaves the ``kimi> `` prompt open on the simulated host. Ctrl-C (SIGINT) or
SIGTERM stops the agent and the simulator before the demo exits.

``--web`` runs the real Slack app (HTTP mode) instead of the terminal front end, against the
Slack stand-in, whose channel page a browser opens (:mod:`bot.demo.web`); with ``--script`` the
session is played into the page, which then stays open until Ctrl-C.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from bot.chat.agent_client import revisions_source
from bot.chat.config import ChatSettings, HostSettings, PolicySettings
from bot.chat.core import build_core
from bot.chat.store_audit import StoreAudit
from bot.demo import _wording as wording
from bot.demo._scenario import ANA, BEN, play
from bot.demo._stack import TOKEN_ENV, demo_stack
from bot.errors import DemoError
from bot.reports import ReportSettings
from bot.reports.runtime import attach_reports
from bot.store import Store
from bot.terminal.cli import EXIT_FAILED, EXIT_OK, prompt_loop
from bot.terminal.front import TerminalFrontEnd

__all__ = ["DemoInterrupted", "configure", "run"]

HOST = "kimi-01"
DEFAULT_TIME_SCALE = 0.03


class DemoInterrupted(BaseException):
    """SIGINT or SIGTERM: unwinds past the prompt's own Ctrl-C handling so the stack stops.

    A BaseException, like KeyboardInterrupt, so no ``except Exception`` on the way swallows it.
    """


def configure(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--script", action="store_true", help="play the scenario and exit (0: every step passed)"
    )
    mode.add_argument(
        "--interactive",
        action="store_true",
        help="after the scenario, a kimi> prompt on the simulated host (default on a terminal)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=DEFAULT_TIME_SCALE,
        help=f"simulated time scale (1.0 = real, ~10 min a start; default {DEFAULT_TIME_SCALE})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the demo folder afterwards")
    parser.add_argument(
        "--web",
        action="store_true",
        help="the Slack app, shown as a Slack channel in the browser (127.0.0.1 only)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="the channel page's port with --web (default: any)"
    )


def run(args: argparse.Namespace) -> int:
    interactive = args.interactive or (not args.script and sys.stdin.isatty())
    root = Path(tempfile.mkdtemp(prefix="kimi-ops-demo-"))
    print(wording.starting(root), flush=True)
    try:
        with _stopped_by_signals():
            if args.web:
                return _play_web(root, args.time_scale, args.script, args.port)
            return _play(root, args.time_scale, interactive)
    except DemoInterrupted:
        print(wording.interrupted(), flush=True)
        return 130
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def _play(root: Path, time_scale: float, interactive: bool) -> int:
    with demo_stack(root, time_scale) as stack, Store(stack.db_url) as store:
        environ = {TOKEN_ENV: stack.token}
        settings = ChatSettings(
            hosts=(HostSettings(HOST, stack.agent_url, TOKEN_ENV, default=True),),
            policy=PolicySettings(appliers=frozenset({ANA.id, BEN.id}), require_second_person=True),
            update_interval_s=1.0,
        )
        front = TerminalFrontEnd(sys.stdout, tty=sys.stdout.isatty())
        audit = StoreAudit(store, revisions_source(settings, environ))
        core = build_core(settings, audit, front, environ, poll_wait_s=5.0)
        attach_reports(core, store, ReportSettings())
        try:
            results = play(core, front)
            failed = [r for r in results if r.problem is not None]
            for result in failed:
                print(wording.failed_step(result.actor, result.text, result.problem or ""))
            if failed:
                print(f"(logs in {root})", file=sys.stderr)
                return EXIT_FAILED
            print(wording.passed(len(results)))
            print(wording.web_hint())
            if interactive:
                chat_config = _write_chat_config(root, stack.agent_url, stack.db_url)
                print(wording.interactive(ANA.id, BEN.id))
                print(wording.other_shell(chat_config, TOKEN_ENV, stack.token))
                return prompt_loop(core, front, ANA, root)
            return EXIT_OK
        finally:
            core.close()


def _write_chat_config(root: Path, agent_url: str, db_url: str) -> Path:
    """The demo's settings as a config file, so ``kimi-ops chat`` from another shell reaches
    the same agent and store under the same policy."""
    path = root / "chat.toml"
    path.write_text(
        "\n".join(
            [
                "[store]",
                f'url = "{db_url}"',
                "",
                "[policy]",
                f'appliers = ["{ANA.id}", "{BEN.id}"]',
                "require_second_person = true",
                "",
                f"[hosts.{HOST}]",
                f'url = "{agent_url}"',
                f'token_env = "{TOKEN_ENV}"',
                "default = true",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return path


def _play_web(root: Path, time_scale: float, script: bool, port: int) -> int:
    from bot.demo.web import PEOPLE, play_script, web_demo

    with (
        demo_stack(root, time_scale) as stack,
        Store(stack.db_url) as store,
        web_demo(stack, store, port) as demo,
    ):
        print(wording.web_open(demo.page_url, [(p.name, p.role) for p in PEOPLE]), flush=True)
        if script:
            try:
                play_script(demo, lambda text: print(wording.web_step(text), flush=True))
            except DemoError as exc:
                print(wording.failed_step("demo", "--web --script", str(exc)))
                print(f"(logs in {root})", file=sys.stderr)
                return EXIT_FAILED
            print(wording.web_played(), flush=True)
        while True:  # until Ctrl-C or SIGTERM raise DemoInterrupted
            time.sleep(0.5)


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    def interrupt(signum: int, frame: FrameType | None) -> None:
        # A second Ctrl-C while the agent and the simulator stop would leave them running.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        raise DemoInterrupted(signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
