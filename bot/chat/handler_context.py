"""The context every command handler works with (one per process, built by
:func:`bot.chat.core.build_core`; a front end serving many channels copies it per command with
its own ``channel``)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from bot.chat.agent_client import AgentClient
from bot.chat.audit import Audit
from bot.chat.config import ChatSettings, HostSettings
from bot.chat.policy import Policy
from bot.chat.reporting import Reporter
from bot.chat.watcher import WatcherPool
from bot.clock import Clock

if TYPE_CHECKING:
    from bot.fleet.desk import FleetDesk

__all__ = ["REPORTS_PROPOSER", "Context"]

#: Who proposes what a capacity report recommends (the bot, not the person who asked for it)
#: where the front end knows no user of the bot's own (``Context.reports_proposer``).
REPORTS_PROPOSER = "kimi-ops-reports"


@dataclass
class Context:
    """What handlers work with; built once per process by :func:`bot.chat.core.build_core`."""

    settings: ChatSettings
    policy: Policy
    audit: Audit
    clients: Mapping[str, AgentClient]
    clock: Clock
    watchers: WatcherPool
    channel: str = "terminal"
    silent_since: dict[str, datetime] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Two history commands at once must not import one foreign operation twice.
    import_lock: threading.Lock = field(default_factory=threading.Lock)
    # Capacity reports and their schedules; None where this process has none set up.
    reporter: Reporter | None = None
    # Fleets and their rollouts; None where no [fleets.*] is configured.
    fleets: FleetDesk | None = None
    # Who proposes what a capacity report recommends: the bot's own user where the front end
    # has one (Slack's auth.test), else a plain name.
    reports_proposer: str = REPORTS_PROPOSER

    def client(self, host: HostSettings) -> AgentClient:
        return self.clients[host.name]
