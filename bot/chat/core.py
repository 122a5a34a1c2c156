"""The core service: text from a person in, a reply to the front end out, watchers running.

::

    audit = StoreAudit(store, revisions_source(settings, os.environ))
    core = build_core(settings, audit, front, environ=os.environ)
    core.resume()                       # watch again what was running when the bot stopped
    reply = core.handle("resize ratio 4", Actor("U1"))   # also handed to front.reply
    core.close()

A parse error never reaches an agent: :func:`bot.chat.grammar.parse` runs first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import httpx

from bot.chat import fleet_commands, live_commands, read_commands, report_commands
from bot.chat.adoption import adopt_applied
from bot.chat.agent_client import connect
from bot.chat.audit import Audit, Watch
from bot.chat.config import ChatSettings
from bot.chat.grammar import (
    Apply,
    Cancel,
    FleetRejoin,
    FleetResize,
    FleetRestart,
    FleetResume,
    FleetRollback,
    Fleets,
    Help,
    History,
    Hosts,
    LiveHiCache,
    Report,
    ReportDaily,
    ReportEvery,
    ReportOff,
    ReportSchedules,
    Resize,
    Restart,
    Rollback,
    Status,
    UsageError,
    parse,
)
from bot.chat.handler_context import Context
from bot.chat.policy import Actor, Policy
from bot.chat.progress import ProgressView
from bot.chat.replies import FrontEnd, Reply, UsageReply
from bot.chat.watcher import Watcher, WatcherPool
from bot.clock import Clock, SystemClock

__all__ = ["ChatCore", "build_core"]

_HANDLERS: dict[type, Callable[[Context, Actor, Any], Reply]] = {
    Help: read_commands.help_,
    Status: read_commands.status,
    Hosts: read_commands.hosts,
    Resize: fleet_commands.host_resize,  # refused on a fleet's replica: the fleet drains it
    Apply: fleet_commands.apply,  # a fleet's proposal starts its rollout; others go to the host
    Cancel: fleet_commands.cancel,  # a fleet's proposal ends its rollout; others go to the host
    Restart: fleet_commands.host_restart,
    Rollback: fleet_commands.host_rollback,
    History: read_commands.history,
    Report: report_commands.report,
    ReportEvery: report_commands.report_every,
    ReportDaily: report_commands.report_daily,
    ReportOff: report_commands.report_off,
    ReportSchedules: report_commands.report_schedules,
    FleetResize: fleet_commands.fleet_resize,
    FleetRestart: fleet_commands.fleet_restart,
    FleetRollback: fleet_commands.fleet_rollback,
    FleetResume: fleet_commands.fleet_resume,
    FleetRejoin: fleet_commands.fleet_rejoin,
    Fleets: fleet_commands.fleets,
    LiveHiCache: live_commands.live_change,
}


class ChatCore:
    """Dispatches commands to handlers and owns the watchers; thread-safe."""

    def __init__(self, context: Context, front: FrontEnd) -> None:
        self.context = context
        self.front = front

    def handle(
        self,
        text: str,
        actor: Actor,
        channel: str | None = None,
        reply_to: Callable[[Actor, Reply], None] | None = None,
    ) -> Reply:
        """Parse ``text`` and carry it out as ``actor``; the reply goes to the front end too.

        A front end serving many channels (Slack) names the command's ``channel``, recorded
        with what it proposes or starts, and ``reply_to``, where this one reply goes instead of
        ``front.reply`` (the command's own ``response_url``); both default to the core's own.
        """
        context = self.context if channel is None else replace(self.context, channel=channel)
        try:
            command = parse(text, context.settings.host_names)
        except UsageError as exc:
            reply: Reply = UsageReply(exc.reason, exc.usage)
        else:
            reply = _HANDLERS[type(command)](context, actor, command)
        (reply_to or self.front.reply)(actor, reply)
        return reply

    def resume(self) -> list[Watch]:
        """Watch again every operation the audit holds as unfinished (after a bot restart), and
        the operations applied proposals started that the audit never recorded."""
        watches = [w for w in self.context.audit.unfinished() if w.host in self.context.clients]
        for watch in watches:
            self.context.watchers.ensure(watch)
        if self.context.fleets is not None:
            self.context.fleets.resume()  # rollouts a stopped bot left running
        return watches + adopt_applied(self.context)

    def wait(self, watch: Watch, timeout_s: float | None = None) -> ProgressView | None:
        """Block until ``watch``'s operation ends (or ``timeout_s``); its final view."""
        # The operation may have ended already: its finished watcher holds the final view.
        watcher = self.context.watchers.find(watch) or self.context.watchers.ensure(watch)
        watcher.done.wait(timeout_s)
        return watcher.final

    def close(self) -> None:
        if self.context.fleets is not None:
            self.context.fleets.close()  # halted where they stand; the next bot resumes them
        self.context.watchers.stop_all()
        for client in self.context.clients.values():
            client.close()


def build_core(
    settings: ChatSettings,
    audit: Audit,
    front: FrontEnd,
    environ: Mapping[str, str],
    clock: Clock | None = None,
    channel: str = "terminal",
    transports: Mapping[str, httpx.BaseTransport] | None = None,
    poll_wait_s: float = 20.0,
    retry_s: float = 2.0,
    reports_proposer: str | None = None,
) -> ChatCore:
    """The core with one agent client per configured host (tokens read from ``environ``);
    ``reports_proposer`` is the bot's own user id, which capacity reports propose by."""
    the_clock = clock or SystemClock()
    clients = {
        host.name: connect(settings, host.name, environ, (transports or {}).get(host.name))
        for host in settings.hosts
    }

    def make_watcher(watch: Watch) -> Watcher:
        return Watcher(
            watch,
            clients[watch.host],
            front,
            audit,
            the_clock,
            settings.update_interval_s,
            poll_wait_s=poll_wait_s,
            retry_s=retry_s,
        )

    context = Context(
        settings=settings,
        policy=Policy(settings.policy),
        audit=audit,
        clients=clients,
        clock=the_clock,
        watchers=WatcherPool(make_watcher),
        channel=channel,
    )
    if reports_proposer is not None:
        context.reports_proposer = reports_proposer
    return ChatCore(context, front)
