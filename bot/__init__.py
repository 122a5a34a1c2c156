"""kimi-ops: plan, apply, watch and audit SGLang HiCache resizes from Slack."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["DISTRIBUTION", "__version__"]

# The name kimi-ops is installed under; its metadata holds the one version, set in pyproject.toml.
DISTRIBUTION = "kimi-ops"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"
