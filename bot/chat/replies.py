"""What the core hands a front end: typed replies to commands, and the :class:`FrontEnd` they go
to. A front end lays these out in its own wording module; it decides nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from bot.agent_json import AgentMemoryNotice, AgentOperation, AgentPlan, AgentStatus
from bot.chat.audit import HistoryEntry, Watch
from bot.chat.policy import Actor, Refusal
from bot.chat.progress import ProgressView
from bot.chat.reporting import ChartImage
from bot.fleet.plan import FleetRefusal
from bot.fleet.rejoin import Rejoined
from bot.fleet.view import RolloutView
from bot.reports import HostReport
from bot.store.records import ReportSchedule

__all__ = [
    "CancelledReply",
    "FleetAnswer",
    "FleetProposalReply",
    "FleetRefusalReply",
    "FleetsReply",
    "FrontEnd",
    "HelpReply",
    "HistoryReply",
    "HostAnswer",
    "HostReportView",
    "HostsReply",
    "MemoryNoticeReply",
    "OperationReply",
    "ProblemReply",
    "ProposalReply",
    "RefusalReply",
    "RejoinReply",
    "Reply",
    "ReportPoster",
    "ReportReply",
    "ReportScheduledReply",
    "ReportSchedulesReply",
    "ReportStoppedReply",
    "RolloutReply",
    "SilentFront",
    "StatusReply",
    "UsageReply",
]


@dataclass(frozen=True)
class HelpReply:
    lines: tuple[str, ...]


@dataclass(frozen=True)
class UsageReply:
    """The text was not a command: the reason and the verb's usage line."""

    reason: str
    usage: str


@dataclass(frozen=True)
class HostAnswer:
    """One host's status, or why it did not answer (a silent host is listed, never dropped)."""

    host: str
    url: str
    default: bool
    status: AgentStatus | None
    problem: str | None
    since: datetime | None = None  # when it was first seen not answering


@dataclass(frozen=True)
class StatusReply:
    hosts: tuple[HostAnswer, ...]


@dataclass(frozen=True)
class HostsReply:
    hosts: tuple[HostAnswer, ...]


@dataclass(frozen=True)
class ProposalReply:
    """A resize plan recorded as proposal ``id``; ``plan.fits`` False means no apply option."""

    id: int
    host: str
    plan: AgentPlan
    proposed_by: str
    expires_at: datetime
    current: str | None  # the host's setting now ("ratio 2 x device pool")


@dataclass(frozen=True)
class RefusalReply:
    refusal: Refusal
    text: str


@dataclass(frozen=True)
class ProblemReply:
    """The command could not be carried out (an agent did not answer, refused a value, ...)."""

    text: str
    host: str | None = None


@dataclass(frozen=True)
class MemoryNoticeReply:
    """The agent's post-ready memory watch saw the server's headroom fall under the guard's
    floor: posted once per notice in the channel of the host's last operation."""

    host: str
    notice: AgentMemoryNotice
    operation_id: int | None = None  # the bot's record of the last operation, when known


@dataclass(frozen=True)
class OperationReply:
    """An operation started (or was found running) and is being watched."""

    watch: Watch
    operation: AgentOperation


@dataclass(frozen=True)
class CancelledReply:
    proposal_id: int
    by: str


@dataclass(frozen=True)
class HistoryReply:
    host: str | None
    entries: tuple[HistoryEntry, ...]


@dataclass(frozen=True)
class HostReportView:
    """One host in a capacity report: its figures, its chart, and the recommendation recorded
    as an ordinary proposal (Apply/Cancel as for ``resize``) when the samples call for one."""

    report: HostReport
    chart: ChartImage | None = None
    proposal: ProposalReply | None = None
    evidence: str | None = None  # why the proposal was made
    #: For a fleet's replica the recommendation is a fleet proposal (or its refusal): a
    #: single-host change would restart the replica while the router still sends to it.
    fleet_proposal: FleetProposalReply | FleetRefusalReply | None = None


@dataclass(frozen=True)
class ReportReply:
    """A capacity report; ``schedule`` is the schedule that posted it (None: asked for now)."""

    hosts: tuple[HostReportView, ...]
    schedule: ReportSchedule | None = None


@dataclass(frozen=True)
class ReportScheduledReply:
    schedule: ReportSchedule
    cadence: str  # as people type it: "every 6h", "daily 09:00"
    timezone: str


@dataclass(frozen=True)
class ReportStoppedReply:
    channel: str
    stopped: tuple[ReportSchedule, ...]


@dataclass(frozen=True)
class ReportSchedulesReply:
    schedules: tuple[ReportSchedule, ...]
    cadences: tuple[str, ...]  # each schedule's cadence as people type it
    timezone: str


@dataclass(frozen=True)
class FleetProposalReply:
    """A fleet resize planned on every replica and recorded as proposal ``id`` (each replica
    has its own proposal; applying this one starts the rollout): ``rollout`` has a line per
    replica with its plan."""

    id: int
    rollout: RolloutView
    proposed_by: str
    expires_at: datetime


@dataclass(frozen=True)
class FleetRefusalReply:
    """A fleet change refused before any replica was touched: each refused host and why."""

    refusal: FleetRefusal


@dataclass(frozen=True)
class RolloutReply:
    """A rollout started (or resumed); its progress follows as views of the same rollout."""

    view: RolloutView
    resumed: bool = False


@dataclass(frozen=True)
class FleetAnswer:
    """One fleet: its router, its replicas' status in rollout order, its running rollout."""

    name: str
    router: str
    replicas: tuple[HostAnswer, ...]
    running: RolloutView | None = None
    #: The fleet's last rollout when it stopped (nothing runs it; 'resume fleet' retries it).
    stopped: RolloutView | None = None
    #: Why the router's worker list could not be read (None: it was).
    router_problem: str | None = None
    #: The replicas the router does not hold (empty when it could not be read).
    out_of_router: tuple[str, ...] = ()


@dataclass(frozen=True)
class RejoinReply:
    """Replicas put back in a fleet's router, or refused with what their check found."""

    fleet: str
    outcomes: tuple[Rejoined, ...]


@dataclass(frozen=True)
class FleetsReply:
    fleets: tuple[FleetAnswer, ...]


Reply = (
    HelpReply
    | UsageReply
    | StatusReply
    | HostsReply
    | ProposalReply
    | RefusalReply
    | ProblemReply
    | MemoryNoticeReply
    | OperationReply
    | CancelledReply
    | HistoryReply
    | ReportReply
    | ReportScheduledReply
    | ReportStoppedReply
    | ReportSchedulesReply
    | FleetProposalReply
    | FleetRefusalReply
    | RolloutReply
    | FleetsReply
    | RejoinReply
)


class FrontEnd(Protocol):
    """Where the core's views go: a Slack app, the terminal, a test's recorder.

    Called from the core's threads (a watcher per operation): implementations must be
    thread-safe.
    """

    def reply(self, actor: Actor, reply: Reply) -> None:
        """The answer to ``actor``'s command."""
        ...

    def progress(self, watch: Watch, view: ProgressView) -> None:
        """A new view of a watched operation (already throttled)."""
        ...

    def notify(self, people: tuple[str, ...], watch: Watch, view: ProgressView) -> None:
        """Tell the people involved that ``watch`` became ready, failed, stalled or rolled back."""
        ...

    def unreachable(self, watch: Watch, since: datetime) -> None:
        """The agent of a watched operation stopped answering at ``since``; watching goes on."""
        ...


class SilentFront:
    """A :class:`FrontEnd` that shows nothing: for a caller that reads the reply ``handle``
    returns itself (``kimi-ops report``, the benches) and watches no operation."""

    def reply(self, actor: Actor, reply: Reply) -> None:
        return None

    def progress(self, watch: Watch, view: ProgressView) -> None:
        return None

    def notify(self, people: tuple[str, ...], watch: Watch, view: ProgressView) -> None:
        return None

    def unreachable(self, watch: Watch, since: datetime) -> None:
        return None


class ReportPoster(Protocol):
    """Where scheduled reports go: a channel with no command before it. The Slack front end posts
    the reply and uploads each host's chart in its thread; the terminal prints it."""

    def post(self, channel: str, reply: Reply) -> None:
        """Post ``reply`` (a :class:`ReportReply`, or a :class:`ProblemReply` when the scheduled
        report itself failed) to ``channel``."""
        ...
