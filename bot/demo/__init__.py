"""``make demo``: the simulator, an agent over real HTTP and a migrated store on one machine,
driven by a scripted on-call session that prints what Slack would show."""

from __future__ import annotations

__all__: list[str] = []
