"""``kimi-ops demo`` (``make demo``): the simulator, an agent over real HTTP, a migrated store and
the bot's core on one machine, played through ``kimi-ops chat``'s terminal front end."""

from __future__ import annotations

__all__: list[str] = []
