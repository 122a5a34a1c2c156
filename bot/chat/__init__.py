"""The bot core: the command grammar, the agent client, policy, proposals, watchers and the audit.

It knows no front end: Slack and the terminal (``bot.terminal``) hand it text and an
:class:`Actor`, and lay out the replies and views it hands their :class:`FrontEnd`. It speaks to
agents only over their HTTP API, never importing ``bot.agent``::

    settings = load_chat_settings(config, path)
    audit = StoreAudit(store, revisions_source(settings, os.environ))
    core = build_core(settings, audit, front, os.environ)
    reply = core.handle("resize ratio 4", Actor("U1"))
"""

from __future__ import annotations

from bot.chat.agent_client import AgentClient, revisions_source
from bot.chat.audit import Audit, Watch
from bot.chat.config import ChatSettings, load_chat_settings
from bot.chat.core import ChatCore, build_core
from bot.chat.grammar import Command, UsageError, parse
from bot.chat.policy import Actor, Policy, Refusal, RefusalKind
from bot.chat.progress import ProgressView, UpdateThrottle, progress_view
from bot.chat.replies import FrontEnd, Reply, SilentFront
from bot.chat.store_audit import StoreAudit

__all__ = [
    "Actor",
    "AgentClient",
    "Audit",
    "ChatCore",
    "ChatSettings",
    "Command",
    "FrontEnd",
    "Policy",
    "ProgressView",
    "Refusal",
    "RefusalKind",
    "Reply",
    "SilentFront",
    "StoreAudit",
    "UpdateThrottle",
    "UsageError",
    "Watch",
    "build_core",
    "load_chat_settings",
    "parse",
    "progress_view",
    "revisions_source",
]
