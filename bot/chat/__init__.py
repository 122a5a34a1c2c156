"""The bot core: the command grammar, the agent client, policy, proposals, watchers and the audit.

It knows no front end: Slack and the terminal (``bot.terminal``) hand it text and render the
views it hands back. It speaks to agents only over their HTTP API, never importing ``bot.agent``.
"""

from __future__ import annotations

from bot.chat.grammar import Command, UsageError, parse

__all__ = ["Command", "UsageError", "parse"]
