"""The agent's facts: one snapshot of host and server, its fingerprint, and plans made on it.

- :mod:`bot.agent.facts.snapshot`: ``FactsService`` (snapshot, plan), ``fingerprint_of``;
- :mod:`bot.agent.facts._values`: the frozen values (``FactsSnapshot``, ``Capacity``, ...);
- :mod:`bot.agent.facts._capacity`: the device pool's sources and the host pool, per rank;
- :mod:`bot.agent.facts._planning`: plans on a snapshot, with the device pool estimate's inputs;
- :mod:`bot.agent.facts._model_files`: ``--model-path``'s config.json and weights' size;
- :mod:`bot.agent.facts._sources`: pure readers of ``/server_info`` and the startup log.
"""

from __future__ import annotations

from bot.agent.facts._values import Capacity, FactsSnapshot, ServerSnapshot
from bot.agent.facts.snapshot import FactsService, fingerprint_of

__all__ = ["Capacity", "FactsService", "FactsSnapshot", "ServerSnapshot", "fingerprint_of"]
