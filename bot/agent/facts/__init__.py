"""The agent's facts: one snapshot of host and server, its fingerprint, and plans made on it.

- :mod:`bot.agent.facts.snapshot`: ``FactsService`` (snapshot, plan), ``fingerprint_of``;
- :mod:`bot.agent.facts._sources`: pure readers of ``/server_info`` and the startup log.
"""

from __future__ import annotations

from bot.agent.facts.snapshot import (
    Capacity,
    FactsService,
    FactsSnapshot,
    ServerSnapshot,
    fingerprint_of,
)

__all__ = ["Capacity", "FactsService", "FactsSnapshot", "ServerSnapshot", "fingerprint_of"]
