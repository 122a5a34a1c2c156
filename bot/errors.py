"""Every error kimi-ops raises on purpose.

Foreign errors (psutil, NVML, httpx, SQLAlchemy, subprocess) are translated at the seam where they
occur, with ``raise ... from exc``, so callers catch one tree::

    KimiOpsError
    ├── ConfigError ............. a settings file, a setting or an environment variable is wrong
    ├── InputError (ValueError) . a value a person or a client sent is not acceptable
    │   ├── PlanInputError ...... a ratio, size, version or pool figure the planner cannot use
    │   └── LogInputError ....... a log file that cannot be read as SGLang output
    ├── ProbeError .............. host facts could not be read
    │   ├── RamProbeError ....... psutil / cgroup
    │   └── GpuProbeError ....... NVML (no library, no driver, a failing call)
    ├── ServerControlError ...... the agent could not act on the SGLang server
    │   ├── CommandLineError .... the server command line cannot be rewritten or fails validation
    │   ├── BackendError ........ systemd / process / docker backend failed (start, stop, log)
    │   └── GpusBusyError ....... GPUs still hold compute processes after the stop
    ├── NotFound ................ no such operation, revision or proposal (the agent's API: 404)
    ├── OperationError .......... an operation request cannot be carried out
    │   ├── OperationConflict ... another operation holds the server (who, since when)
    │   ├── StaleProposal ....... the facts changed since the proposal was made
    │   └── PlanRefused ......... the planner's verdict is "refused" (carries the Plan)
    ├── AgentError .............. the bot could not get an answer it can use from an agent
    │   ├── AgentUnreachable .... connection refused, timeout, DNS
    │   │   └── AgentCertificateError  the agent's TLS certificate is not the one trusted
    │   ├── AgentAuthError ...... 401 from the agent
    │   ├── AgentUnavailable .... 503: the agent answered, its host or state could not
    │   └── AgentRejected ....... 4xx with a reason from the agent (``body`` as sent)
    │       ├── AgentNotFound ... 404: no such operation or revision
    │       ├── AgentBusy ....... 409: another operation holds the server (holder, since)
    │       ├── AgentStale ...... 409: the facts changed since the plan's fingerprint
    │       └── AgentPlanRefused  422 with the Plan: the planner refused the change
    ├── StoreError .............. the database refused or failed a read or a write
    │   ├── MigrationError ...... the schema cannot be brought to the expected revision
    │   ├── SchedulerLocked ..... another live bot process runs the report scheduler on it
    │   └── StateDirLocked ...... another live agent holds the agent's state directory
    ├── FleetError .............. a rollout cannot be planned, started or carried on
    │   ├── FleetBusy ........... another rollout of the fleet is running (which, since when)
    │   └── RouterError ......... the router did not give an answer the rollout can use
    │       └── RouterUnsupported  the router speaks no worker API kimi-ops knows
    ├── SlackStartError ......... Slack refused the bot's token, or could not be reached, at start
    ├── SimError ................ the simulator was given a profile or a setting it cannot use
    └── DemoError ............... ``make demo``'s machine (agent, simulator) did not come up

Nothing raises the root itself: each error names its kind by its class. Control flow that is not
an error stays local to its module and outside this tree (the engine's ``Abandoned``, raised when
the agent shuts down mid-operation, and the crash tests' ``SimulatedCrash``, a BaseException).

Messages name the value at fault and, where there is one, the fix:
"hicache size '44.5' is not a whole number of GB; SGLang takes integers (try 44 or 45)."
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AgentAuthError",
    "AgentBusy",
    "AgentCertificateError",
    "AgentError",
    "AgentNotFound",
    "AgentPlanRefused",
    "AgentRejected",
    "AgentStale",
    "AgentUnavailable",
    "AgentUnreachable",
    "BackendError",
    "CommandLineError",
    "ConfigError",
    "DemoError",
    "FleetBusy",
    "FleetError",
    "GpuProbeError",
    "GpusBusyError",
    "InputError",
    "KimiOpsError",
    "LogInputError",
    "MigrationError",
    "NotFound",
    "OperationConflict",
    "OperationError",
    "PlanInputError",
    "PlanRefused",
    "ProbeError",
    "RamProbeError",
    "RouterError",
    "RouterUnsupported",
    "SchedulerLocked",
    "ServerControlError",
    "SimError",
    "SlackStartError",
    "StaleProposal",
    "StateDirLocked",
    "StoreError",
]


class KimiOpsError(Exception):
    """Root of every error kimi-ops raises on purpose."""


class ConfigError(KimiOpsError):
    """A settings file, a setting or an environment variable is wrong or missing."""


class InputError(KimiOpsError, ValueError):
    """A value sent by a person or a client is not acceptable; nothing was changed."""


class PlanInputError(InputError):
    """The planner was given a ratio, size, version or pool figure it cannot use."""


class LogInputError(InputError):
    """A file given as an SGLang log cannot be read."""


class ProbeError(KimiOpsError):
    """Host facts could not be read."""


class RamProbeError(ProbeError):
    """psutil or the cgroup files could not tell the host's memory."""


class GpuProbeError(ProbeError):
    """NVML could not tell the GPUs' state (no library, no driver, or a failing call)."""


class ServerControlError(KimiOpsError):
    """The agent could not act on the SGLang server."""


class CommandLineError(ServerControlError):
    """The server's command line cannot be rewritten, or the rewritten line fails validation."""


class BackendError(ServerControlError):
    """The server-control backend (systemd or process) failed to start, stop or report."""


class GpusBusyError(ServerControlError):
    """Compute processes still hold the server's GPUs after it was stopped."""

    def __init__(self, message: str, processes: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.processes: list[dict[str, Any]] = processes or []


class OperationError(KimiOpsError):
    """An operation request cannot be carried out."""


class OperationConflict(OperationError):
    """Another operation holds the server."""

    def __init__(self, message: str, holder: str = "", since: str = "") -> None:
        super().__init__(message)
        self.holder = holder
        self.since = since


class StaleProposal(OperationError):
    """The facts a proposal was planned on have changed since."""


class PlanRefused(OperationError):
    """The planner refused the change; ``plan`` holds its figures and reason."""

    def __init__(self, message: str, plan: object | None = None) -> None:
        super().__init__(message)
        self.plan = plan


class NotFound(KimiOpsError):
    """No operation, revision or proposal with that id (not an operation's failure: the store
    raises it for proposals too)."""


class AgentError(KimiOpsError):
    """The bot could not get a usable answer from an agent."""


class AgentUnreachable(AgentError):
    """The agent did not answer (connection refused, timeout, name resolution)."""


class AgentCertificateError(AgentUnreachable):
    """The agent's TLS certificate is not the pinned one, or does not verify: the connection
    was closed in the handshake, before any request was sent."""


class AgentAuthError(AgentError):
    """The agent answered 401: the bot's token for it is wrong."""


class AgentRejected(AgentError):
    """The agent answered with a 4xx and a reason."""

    def __init__(self, message: str, status_code: int = 400, body: object | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body


class AgentNotFound(AgentRejected):
    """404: the agent has no such operation or revision."""


class AgentBusy(AgentRejected):
    """409: another operation holds the server; ``holder`` started it at ``since``."""

    def __init__(self, message: str, body: Mapping[str, Any], holder: str, since: str) -> None:
        super().__init__(message, status_code=409, body=dict(body))
        self.holder = holder
        self.since = since


class AgentStale(AgentRejected):
    """409: the host's facts changed since the plan's fingerprint was taken."""


class AgentPlanRefused(AgentRejected):
    """422 with a Plan: the planner refused the change (``plan`` is the agent's Plan JSON)."""

    def __init__(self, message: str, body: Mapping[str, Any], plan: Mapping[str, Any]) -> None:
        super().__init__(message, status_code=422, body=dict(body))
        self.plan: Mapping[str, Any] = plan


class AgentUnavailable(AgentError):
    """503: the agent answered but the host, its server control or its state could not."""

    def __init__(self, message: str, body: object | None = None) -> None:
        super().__init__(message)
        self.body = body


class StoreError(KimiOpsError):
    """The database refused or failed a read or a write."""


class MigrationError(StoreError):
    """The schema cannot be brought to the expected revision."""


class SchedulerLocked(StoreError):
    """Another bot process, alive (its heartbeat is fresh), runs the report scheduler on this
    database: a second would post every report twice."""

    def __init__(self, message: str, owner: str) -> None:
        super().__init__(message)
        self.owner = owner


class SlackStartError(KimiOpsError):
    """Slack refused the bot's token, or its Web API could not be reached, as the bot started."""


class StateDirLocked(StoreError):
    """Another agent process holds the lock on this ``state_dir``: two agents on one state would
    both accept operations and drive the same server."""

    def __init__(self, message: str, holder_pid: int | None) -> None:
        super().__init__(message)
        self.holder_pid = holder_pid


class SimError(KimiOpsError):
    """The simulator was given a profile or a setting it cannot use."""


class DemoError(KimiOpsError):
    """``make demo``'s machine did not come up: the agent exited or never listened."""


class FleetError(KimiOpsError):
    """A rollout cannot be planned, started or carried on."""


class FleetBusy(FleetError):
    """Another rollout of the fleet is running: a fleet changes one rollout at a time."""

    def __init__(self, message: str, rollout_id: int) -> None:
        super().__init__(message)
        self.rollout_id = rollout_id


class RouterError(FleetError):
    """The router could not be reached, refused a call, or sent what kimi-ops cannot read."""


class RouterUnsupported(RouterError):
    """The router answers none of the worker APIs of sglang-router 0.1.x, 0.2.x or 0.3.x."""
