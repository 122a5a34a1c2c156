"""``kimi-ops demo``: everything on one machine, with no Slack and no GPU."""

from __future__ import annotations

__all__: list[str] = []
