"""The fleet's errors, under :class:`bot.errors.KimiOpsError`::

KimiOpsError
└── FleetError ................ a rollout cannot be planned, started or carried on
    └── RouterError ........... the router did not give an answer the rollout can use
        └── RouterUnsupported . the router speaks no worker API kimi-ops knows
"""

from __future__ import annotations

from bot.errors import KimiOpsError

__all__ = ["FleetError", "RouterError", "RouterUnsupported"]


class FleetError(KimiOpsError):
    """A rollout cannot be planned, started or carried on."""


class RouterError(FleetError):
    """The router could not be reached, refused a call, or sent what kimi-ops cannot read."""


class RouterUnsupported(RouterError):
    """The router answers none of the worker APIs of sglang-router 0.1.x, 0.2.x or 0.3.x."""
