"""The commands of the ``/kimi`` language as typed, frozen values (what :func:`bot.chat.parse`
returns and the core's handlers take)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Apply",
    "Cancel",
    "Command",
    "FleetRejoin",
    "FleetResize",
    "FleetRestart",
    "FleetResume",
    "FleetRollback",
    "Fleets",
    "Help",
    "History",
    "Hosts",
    "LiveHiCache",
    "Report",
    "ReportDaily",
    "ReportEvery",
    "ReportOff",
    "ReportSchedules",
    "Resize",
    "Restart",
    "Rollback",
    "Status",
]


@dataclass(frozen=True)
class Help:
    """``help``: the grammar, with examples."""


@dataclass(frozen=True)
class Status:
    host: str | None = None


@dataclass(frozen=True)
class Resize:
    """A HiCache change: exactly one of ``ratio`` and ``size_gb`` is set, or neither with
    ``auto`` (``resize auto``: SGLang >= 0.5.23 sizes the host pool itself)."""

    ratio: float | None = None
    size_gb: int | None = None
    host: str | None = None
    auto: bool = False


@dataclass(frozen=True)
class LiveHiCache:
    """``storage attach|detach|clear`` and ``hicache write-policy|prefetch-policy``: a change
    SGLang's runtime API may make with no restart. ``kind`` is a
    :class:`bot.vocab.LiveChangeKind` value; ``extra_config`` the backend's config as JSON
    text (or ``@path`` on the host)."""

    kind: str
    backend: str | None = None
    extra_config: str | None = None
    policy: str | None = None
    host: str | None = None


@dataclass(frozen=True)
class Apply:
    proposal_id: int


@dataclass(frozen=True)
class Cancel:
    proposal_id: int


@dataclass(frozen=True)
class Restart:
    host: str | None = None


@dataclass(frozen=True)
class Rollback:
    """Return to ``revision`` (None: the last configuration that became ready)."""

    revision: int | None = None
    host: str | None = None


@dataclass(frozen=True)
class History:
    limit: int | None = None
    host: str | None = None


@dataclass(frozen=True)
class Hosts:
    """``hosts``: every configured agent and whether it answers."""


@dataclass(frozen=True)
class Report:
    """``report [host]``: the capacity report now."""

    host: str | None = None


@dataclass(frozen=True)
class ReportEvery:
    interval_s: int


@dataclass(frozen=True)
class ReportDaily:
    hour: int
    minute: int


@dataclass(frozen=True)
class ReportOff:
    """``report off [N]``: stop this channel's schedule N (every one of them without N)."""

    schedule_id: int | None = None


@dataclass(frozen=True)
class ReportSchedules:
    pass


@dataclass(frozen=True)
class FleetResize:
    """``resize ratio <R> fleet <name>`` / ``resize size <GB> fleet <name>``: a proposal for
    every replica; exactly one of ``ratio`` and ``size_gb`` is set."""

    fleet: str
    ratio: float | None = None
    size_gb: int | None = None


@dataclass(frozen=True)
class FleetRestart:
    """``restart fleet <name>``: every replica restarted one by one, out of the router."""

    fleet: str


@dataclass(frozen=True)
class FleetRollback:
    """``rollback fleet <name>``: undo the replicas the fleet's last rollout changed."""

    fleet: str


@dataclass(frozen=True)
class FleetResume:
    """``resume fleet <name>``: carry on the fleet's stopped or unfinished rollout."""

    fleet: str


@dataclass(frozen=True)
class FleetRejoin:
    """``fleet <name> rejoin <host>``: put a replica that serves but is out of the router back,
    after its health and breaker are checked."""

    fleet: str
    host: str


@dataclass(frozen=True)
class Fleets:
    """``fleets``: every fleet with its replicas' configs."""


Command = (
    Help
    | Status
    | Resize
    | Apply
    | Cancel
    | Restart
    | Rollback
    | History
    | Hosts
    | Report
    | ReportEvery
    | ReportDaily
    | ReportOff
    | ReportSchedules
    | FleetResize
    | FleetRestart
    | FleetRollback
    | FleetResume
    | FleetRejoin
    | Fleets
    | LiveHiCache
)
