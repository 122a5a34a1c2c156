"""kimi-ops: plan, apply, watch and audit SGLang HiCache resizes from Slack."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
