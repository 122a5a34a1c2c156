"""The terminal front end: ``kimi-ops chat``, over the same core as the Slack app.

Its wording lives in :mod:`bot.terminal.wording`; it decides nothing the core does not.
"""

from __future__ import annotations

from bot.terminal.front import TerminalFrontEnd

__all__ = ["TerminalFrontEnd"]
