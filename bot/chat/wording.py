"""The core's words, the same for every front end: refusals, phase names and how figures read.

Front ends lay these out (Block Kit, terminal lines) but do not re-word them, so Slack, the
terminal and the demo tell a person the same thing.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from bot.chat.audit import HistoryEntry, RollbackTarget
from bot.chat.policy import Action, Refusal, RefusalKind
from bot.chat.progress import ProgressView
from bot.reports.model import ServerMetrics
from bot.vocab import EventPhase

__all__ = [
    "PHASE_LABEL",
    "clock",
    "count",
    "doing",
    "figure",
    "hhmm",
    "history_note",
    "load_text",
    "local_time",
    "refusal_text",
    "rollback_head",
    "rollback_to_off_text",
    "uptime_text",
]

_VERB = {
    Action.APPLY: "apply proposals",
    Action.RESTART: "restart servers",
    Action.ROLLBACK: "roll servers back",
    Action.SCHEDULE: "schedule reports",
    Action.CANCEL: "cancel this proposal",
}


#: What each phase of an operation is called, on every surface.
PHASE_LABEL: dict[EventPhase, str] = {
    EventPhase.PLANNED: "planned",
    EventPhase.STOPPING: "stopping the server",
    EventPhase.WAITING_GPUS: "waiting for the GPUs to free",
    EventPhase.STARTING: "starting",
    EventPhase.INIT: "init",
    EventPhase.LOAD_WEIGHTS: "loading weights",
    EventPhase.KV_POOL: "KV pool",
    EventPhase.CUDA_GRAPH: "CUDA graphs",
    EventPhase.HOST_POOL: "host pool",
    EventPhase.HTTP: "HTTP up",
    EventPhase.WARMUP: "warmup",
    EventPhase.VERIFYING: "verifying",
    EventPhase.READY: "ready",
    EventPhase.STALLED: "stalled",
    EventPhase.ROLLING_BACK: "rolling back",
    EventPhase.ROLLED_BACK: "rolled back",
    EventPhase.FAILED: "failed",
}


def figure(value: float | None, digits: int = 2) -> str:
    """``1,234.57``: a figure with thousands separators; ``?`` when unknown."""
    return "?" if value is None else f"{value:,.{digits}f}"


def count(value: int | None) -> str:
    """``637,097``; ``?`` when unknown."""
    return "?" if value is None else f"{value:,}"


def clock(seconds: float) -> str:
    """``6:12``: minutes and seconds."""
    whole = int(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def doing(view: ProgressView) -> str:
    """What an operation is doing now: ``loading weights 29/64 shards``."""
    label = PHASE_LABEL.get(view.phase, str(view.phase)) if view.phase else "waiting"
    if view.phase is EventPhase.LOAD_WEIGHTS and view.shard is not None:
        return f"{label} {view.shard[0]}/{view.shard[1]} shards"
    if view.phase is EventPhase.CUDA_GRAPH and view.graphs is not None:
        return f"{label} {view.graphs[0]}/{view.graphs[1]}"
    return label


def hhmm(at: datetime | None, zone: str = "UTC") -> str:
    """A time as people read it in a channel, in ``zone`` (``[reports] timezone`` where the
    caller has it): ``09:14 UTC``, ``10:14 Europe/Paris``."""
    if at is None:
        return "an unknown time"
    return f"{at.astimezone(ZoneInfo(zone)):%H:%M} {zone}"


def local_time(at: datetime, zone: str) -> str:
    """A schedule's run time in the zone its ``daily HH:MM`` is read in (``[reports]
    timezone``), named: ``2026-12-01 09:30 Europe/Paris``."""
    return f"{at.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M} {zone}"


def refusal_text(refusal: Refusal) -> str:
    """One sentence: what was refused, why, and what to do instead."""
    pid = f"proposal #{refusal.proposal_id}"
    kind = refusal.kind
    if kind is RefusalKind.UNAUTHORIZED:
        who = (
            "only its proposer or an applier may"
            if refusal.action is Action.CANCEL
            else "only the people in [policy] appliers (or its usergroups) may"
        )
        unread = f" ({refusal.detail})" if refusal.detail else ""
        return f"{refusal.actor} may not {_VERB[refusal.action]}: {who}{unread}"
    if kind is RefusalKind.SECOND_PERSON:
        return f"{pid} was proposed by {refusal.actor}; the policy asks a second person to apply it"
    if kind is RefusalKind.EXPIRED:
        return f"{pid} expired at {hhmm(refusal.at)}; ask for the resize again"
    if kind is RefusalKind.STALE:
        return (
            f"{pid} is void: another operation started on {refusal.host} at {hhmm(refusal.at)}, "
            "after it was proposed; ask for the resize again"
        )
    if kind is RefusalKind.LOCKED:
        if refusal.proposal_id is None:
            return (
                f"{refusal.host} is busy: an operation by {refusal.by} has held it since "
                f"{hhmm(refusal.at)}"
            )
        by = f" by {refusal.by}" if refusal.by else ""
        return f"{pid} was already {refusal.detail}{by} at {hhmm(refusal.at)}"
    return f"{pid} cannot be applied: the plan was refused. {refusal.detail}".rstrip()


def history_note(entry: HistoryEntry) -> str:
    """What a history row adds after its figures: the failure kind, and what the revision is
    when it is not a new config started anew (``restart``; ``rollback to #7``; ``live, no
    restart``)."""
    notes = [entry.failure_kind] if entry.failure_kind else []
    if entry.kind == "restart":
        notes.append("restart")
    elif entry.kind == "live":
        notes.append("live, no restart")
    elif entry.kind == "rollback":
        notes.append(
            "rollback" if entry.returned_to is None else f"rollback to #{entry.returned_to}"
        )
    return f"  ({', '.join(notes)})" if notes else ""


def rollback_head(target: RollbackTarget) -> str:
    """What a rollback proposal returns to, by the number ``history`` shows:
    ``Roll back kimi-01 to revision 7: ratio 4 x device pool (applied by ana on 2026-12-01
    14:02 UTC)``."""
    who = target.applied_by or "the agent"
    when = "" if target.applied_at is None else f" on {target.applied_at:%Y-%m-%d %H:%M} UTC"
    return (
        f"Roll back {target.host} to revision {target.revision}: "
        f"{target.setting.effective_phrase()} (applied by {who}{when})"
    )


def rollback_to_off_text(target: RollbackTarget) -> str:
    """Why a rollback to a config with HiCache off is not proposed."""
    return (
        f"revision {target.revision} of {target.host} ran with HiCache off; a rollback is "
        "planned as a HiCache change, so this one cannot be proposed: edit the command line "
        "on the host"
    )


def uptime_text(seconds: float | None) -> str:
    """A server's uptime, the same on every surface, in units that cannot be misread:
    ``42 s``, ``3 min 23 s``, ``2 h 05 min``, ``3 d 04 h``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole // 60 % 60:02d} min"
    return f"{whole // 86400} d {whole // 3600 % 24:02d} h"


def load_text(metrics: ServerMetrics | None) -> str:
    """SGLang's gauges a report shows, or why there are none."""
    if metrics is None:
        return "no /metrics from this server (start SGLang with --enable-metrics)"
    parts = []
    if metrics.token_usage is not None:
        parts.append(f"token usage {metrics.token_usage:.0%}")
    if metrics.running_requests is not None:
        parts.append(f"{metrics.running_requests} running")
    if metrics.queued_requests is not None:
        parts.append(f"{metrics.queued_requests} queued")
    if metrics.cache_hit_rate is not None:
        parts.append(f"cache hit rate {metrics.cache_hit_rate:.0%}")
    return ", ".join(parts) or "none of the gauges kimi-ops reads"
