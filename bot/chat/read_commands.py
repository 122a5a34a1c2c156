"""The commands that only read: ``help``, ``status``, ``hosts`` and ``history`` (which first
records what the agents ran without this bot), one plain function each:
``(context, actor, command) -> Reply``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from bot.chat._usage import help_lines
from bot.chat.config import HostSettings
from bot.chat.grammar import Help, History, Hosts, Status
from bot.chat.handler_context import Context
from bot.chat.policy import Actor
from bot.chat.replies import HelpReply, HistoryReply, HostsReply, Reply, StatusReply
from bot.chat.shared_replies import ask_all
from bot.errors import AgentError

__all__ = ["DEFAULT_HISTORY", "help_", "history", "hosts", "import_foreign", "status"]

DEFAULT_HISTORY = 10


def help_(ctx: Context, actor: Actor, command: Help) -> Reply:
    # report daily HH:MM is read in [reports] timezone, so help says which zone that is.
    zone = ctx.settings.timezone if ctx.reporter is None else ctx.reporter.timezone
    return HelpReply(help_lines(zone))


def status(ctx: Context, actor: Actor, command: Status) -> Reply:
    """One host when named, else every host (the default first)."""
    if command.host is not None:
        return StatusReply(ask_all(ctx, (command.host,)))
    names = sorted(ctx.settings.host_names, key=lambda n: n != ctx.settings.default_host.name)
    return StatusReply(ask_all(ctx, tuple(names)))


def hosts(ctx: Context, actor: Actor, command: Hosts) -> Reply:
    return HostsReply(ask_all(ctx, ctx.settings.host_names))


def import_foreign(ctx: Context, names: tuple[str, ...], limit: int = 50) -> None:
    """Record the operations the agents ran that the audit does not know (started by another
    bot, an admin with curl, ...), and watch those still running. A silent agent is skipped:
    history then shows what the store holds."""

    def one(host: HostSettings) -> None:
        client = ctx.client(host)
        try:
            recent = client.operations(limit)
            for operation in reversed(recent):
                if ctx.audit.known(host.name, operation.id):
                    continue
                events = client.events(operation.id).events
                watch = ctx.audit.import_operation(host.name, operation, events)
                if not operation.finished:
                    ctx.watchers.ensure(watch)
        except AgentError:
            return

    hosts = [ctx.settings.host(name) for name in names]
    with ctx.import_lock, ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        list(pool.map(one, hosts))


def history(ctx: Context, actor: Actor, command: History) -> Reply:
    """The audit, after importing what the agents ran without this bot."""
    names = ctx.settings.host_names if command.host is None else (command.host,)
    import_foreign(ctx, names)
    entries = ctx.audit.history(command.host, command.limit or DEFAULT_HISTORY)
    return HistoryReply(command.host, tuple(entries))
