"""Revisions and proposals: the audit of every configuration asked for, and what became of it.

A revision's life: ``proposed`` -> ``applied`` -> ``ready`` | ``failed``; a proposal may also end
``cancelled``, ``expired`` or ``refused``; ``failed`` (or a ``ready`` config someone later
undid) becomes ``rolled_back`` when a rollback revision returns the host to an earlier config.
Recording the outcome a revision already has is a no-op: the first record wins, so a bot that
resumes watching after a restart cannot rewrite the audit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.errors import InputError, NotFound
from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._convert import proposal_record, revision_record
from bot.store._models import CHANNEL, HOST, TS, USER, ProposalRow, RevisionRow
from bot.store.records import (
    FINAL_OUTCOMES,
    HiCacheSettings,
    Outcome,
    PlanSummary,
    ProposalRecord,
    RevisionRecord,
    StartupDuration,
)

__all__ = ["RevisionsMixin", "get_revision"]

_NEXT: dict[Outcome, frozenset[Outcome]] = {
    Outcome.PROPOSED: frozenset(
        {Outcome.CANCELLED, Outcome.EXPIRED, Outcome.REFUSED, Outcome.APPLIED}
    ),
    Outcome.APPLIED: frozenset(
        {Outcome.READY, Outcome.FAILED, Outcome.ROLLED_BACK, Outcome.REFUSED}
    ),
    Outcome.READY: frozenset({Outcome.ROLLED_BACK}),
    Outcome.FAILED: frozenset({Outcome.ROLLED_BACK}),
}


def get_revision(session: Session, revision_id: object, *, lock: bool = False) -> RevisionRow:
    rid = v.count("revision id", revision_id, minimum=1)
    query = select(RevisionRow).where(RevisionRow.id == rid)
    if lock:
        query = query.with_for_update()
    row = session.scalars(query).one_or_none()
    if row is None:
        raise NotFound(f"no revision {rid} is recorded; `kimi-ops history` lists them")
    return row


def _check_transition(row: RevisionRow, target: Outcome) -> None:
    current = Outcome(row.outcome)
    allowed = _NEXT.get(current, frozenset())
    if target not in allowed:
        options = ", ".join(sorted(o.value for o in allowed)) or "nothing (it is final)"
        raise InputError(
            f"revision {row.id} is {current.value!r}; it cannot become {target.value!r} "
            f"(from {current.value!r} it can become: {options})"
        )


def _settings_columns(settings: HiCacheSettings) -> dict[str, Any]:
    if not isinstance(settings, HiCacheSettings):
        raise InputError(f"settings must be a HiCacheSettings, not {type(settings).__name__}")
    if not isinstance(settings.enabled, bool):
        raise InputError(f"settings.enabled must be true or false, not {settings.enabled!r}")
    return {
        "hicache_enabled": settings.enabled,
        "hicache_ratio": v.optional_finite("hicache ratio", settings.ratio, minimum=0),
        "hicache_size_gb": v.optional_count("hicache size (GB)", settings.size_gb, big=False),
        "hicache_write_policy": v.optional_text("write policy", settings.write_policy, 64),
        "hicache_io_backend": v.optional_text("io backend", settings.io_backend, 64),
        "command_line": v.text_list("command line", settings.command_line),
    }


def _plan_columns(plan: PlanSummary) -> dict[str, Any]:
    if not isinstance(plan, PlanSummary):
        raise InputError(f"plan must be a PlanSummary, not {type(plan).__name__}")
    return {
        "plan": v.json_object("plan detail", plan.detail),
        "plan_per_rank_gb": v.finite("plan per-rank GB", plan.per_rank_gb, minimum=0),
        "plan_total_gb": v.finite("plan total GB", plan.total_gb, minimum=0),
        "plan_per_rank_tokens": v.count("plan per-rank tokens", plan.per_rank_tokens),
        "plan_verdict": v.text("plan verdict", plan.verdict, 32),
        "plan_reason": v.free_text("plan reason", plan.reason),
    }


class RevisionsMixin(StoreBase):
    def record_revision(
        self,
        host: str,
        settings: HiCacheSettings,
        plan: PlanSummary,
        *,
        proposed_by: str | None,
        outcome: Outcome | str = Outcome.PROPOSED,
        at: datetime | None = None,
        rollback_of: int | None = None,
        returned_to: int | None = None,
    ) -> RevisionRecord:
        """Record a configuration asked for (``proposed``, or ``refused`` straight away)."""
        start = v.outcome(outcome)
        if start not in (Outcome.PROPOSED, Outcome.REFUSED):
            raise InputError(
                f"a new revision starts 'proposed' or 'refused', not {start.value!r}; "
                "record_apply and record_outcome move it on"
            )
        when = self._at(at)
        with self._write("record a revision") as session:
            row = self._new_revision(
                session, host, settings, plan, proposed_by, when, rollback_of, returned_to
            )
            row.outcome = start.value
            row.finished_at = when if start in FINAL_OUTCOMES else None
            session.flush()
            return revision_record(row)

    def _new_revision(
        self,
        session: Session,
        host: str,
        settings: HiCacheSettings,
        plan: PlanSummary,
        proposed_by: str | None,
        when: datetime,
        rollback_of: int | None,
        returned_to: int | None,
    ) -> RevisionRow:
        row = RevisionRow(
            host=v.text("host", host, HOST),
            **_settings_columns(settings),
            **_plan_columns(plan),
            proposed_by=v.optional_text("proposed by (Slack user id)", proposed_by, USER),
            proposed_at=when,
            outcome=Outcome.PROPOSED.value,
            failure_lines=[],
        )
        for name, ref in (("rollback_of", rollback_of), ("returned_to", returned_to)):
            if ref is not None:
                target = get_revision(session, ref)
                if target.host != row.host:
                    raise InputError(
                        f"{name} revision {target.id} is of host {target.host!r}, "
                        f"not {row.host!r}; a rollback stays on its host"
                    )
                setattr(row, name, target.id)
        session.add(row)
        return row

    def record_proposal(
        self,
        host: str,
        settings: HiCacheSettings,
        plan: PlanSummary,
        *,
        proposed_by: str,
        channel: str,
        expires_at: datetime,
        fingerprint: str,
        requested: Mapping[str, Any],
        message_ts: str | None = None,
        at: datetime | None = None,
        returned_to: int | None = None,
    ) -> ProposalRecord:
        """Record a proposal shown in Slack and its revision (``proposed``), in one transaction."""
        when = self._at(at)
        expiry = v.instant("expires_at", expires_at)
        if expiry <= when:
            raise InputError(
                f"expires_at {expiry.isoformat()} is not after the proposal time "
                f"{when.isoformat()}; a proposal must be open for some time"
            )
        values = {
            "channel": v.text("channel", channel, CHANNEL),
            "message_ts": v.optional_text("message ts", message_ts, TS),
            "fingerprint": v.text("fingerprint", fingerprint, 128),
            "requested": v.json_object("requested change", requested),
        }
        v.text("proposed by (Slack user id)", proposed_by, USER)
        with self._write("record a proposal") as session:
            revision = self._new_revision(
                session, host, settings, plan, proposed_by, when, None, returned_to
            )
            session.flush()
            row = ProposalRow(revision_id=revision.id, expires_at=expiry, created_at=when, **values)
            session.add(row)
            session.flush()
            return proposal_record(row)

    def record_apply(
        self, revision_id: int, applied_by: str, at: datetime | None = None
    ) -> RevisionRecord:
        """A person applied the revision and the agent accepted it: ``proposed`` -> ``applied``."""
        who = v.text("applied by (Slack user id)", applied_by, USER)
        when = self._at(at)
        with self._write("record an apply") as session:
            row = get_revision(session, revision_id, lock=True)
            if row.outcome == Outcome.APPLIED.value:
                return revision_record(row)
            _check_transition(row, Outcome.APPLIED)
            row.outcome, row.applied_by, row.applied_at = Outcome.APPLIED.value, who, when
            return revision_record(row)

    def record_outcome(
        self,
        revision_id: int,
        outcome: Outcome | str,
        *,
        at: datetime | None = None,
        startup_seconds: float | None = None,
        device_tokens: int | None = None,
        host_gb_per_rank: float | None = None,
        host_tokens_per_rank: int | None = None,
        failure_kind: str | None = None,
        failure_lines: Iterable[str] = (),
    ) -> RevisionRecord:
        """Record where a revision ended: cancelled, expired, refused, ready, failed, rolled_back.

        Figures reached (startup seconds, device tokens, host GB and tokens per rank) go with
        ``ready`` or ``failed``; the failure kind and its decisive log lines with ``failed``.
        """
        target = v.outcome(outcome)
        if target in (Outcome.PROPOSED, Outcome.APPLIED):
            raise InputError(
                f"outcome {target.value!r} is not an end; use record_revision / record_apply"
            )
        figures = {
            "startup_seconds": v.optional_finite("startup seconds", startup_seconds, minimum=0),
            "device_tokens": v.optional_count("device tokens", device_tokens),
            "host_gb_per_rank": v.optional_finite("host GB per rank", host_gb_per_rank, 0),
            "host_tokens_per_rank": v.optional_count("host tokens per rank", host_tokens_per_rank),
        }
        kind = v.optional_text("failure kind", failure_kind, 64)
        lines = v.text_list("failure lines", failure_lines)
        if target not in (Outcome.READY, Outcome.FAILED) and any(
            value is not None for value in figures.values()
        ):
            raise InputError(
                f"startup figures belong to a 'ready' or 'failed' outcome, not {target.value!r}"
            )
        if target is not Outcome.FAILED and (kind is not None or lines):
            raise InputError(f"a failure kind and lines belong to 'failed', not {target.value!r}")
        when = self._at(at)
        with self._write("record an outcome") as session:
            row = get_revision(session, revision_id, lock=True)
            if row.outcome == target.value:
                return revision_record(row)
            _check_transition(row, target)
            row.outcome = target.value
            # A rollback keeps the time the revision's own start ended, if it had one.
            if target is not Outcome.ROLLED_BACK or row.finished_at is None:
                row.finished_at = when
            for name, value in figures.items():
                if value is not None:
                    setattr(row, name, value)
            if target is Outcome.FAILED:
                row.failure_kind, row.failure_lines = kind, lines
            return revision_record(row)

    def record_rollback(
        self,
        rollback_of: int,
        returned_to: int,
        *,
        applied_by: str | None = None,
        at: datetime | None = None,
    ) -> RevisionRecord:
        """The host returns to ``returned_to``'s config after ``rollback_of``: one transaction
        marks ``rollback_of`` rolled back and records the rollback as a new ``applied`` revision
        (settings and plan copied from ``returned_to``; ``applied_by`` None: the agent did it)."""
        who = v.optional_text("applied by (Slack user id)", applied_by, USER)
        when = self._at(at)
        with self._write("record a rollback") as session:
            undone = get_revision(session, rollback_of, lock=True)
            source = get_revision(session, returned_to)
            if source.host != undone.host:
                raise InputError(
                    f"revision {source.id} is of host {source.host!r}, not {undone.host!r}; "
                    "a rollback stays on its host"
                )
            if source.id == undone.id:
                raise InputError(f"revision {undone.id} cannot be rolled back to itself")
            if Outcome(source.outcome) not in (Outcome.READY, Outcome.ROLLED_BACK):
                raise InputError(
                    f"revision {source.id} is {source.outcome!r}; a rollback returns to a config "
                    "that ran (ready, or rolled back since)"
                )
            if undone.outcome != Outcome.ROLLED_BACK.value:
                _check_transition(undone, Outcome.ROLLED_BACK)
                undone.outcome = Outcome.ROLLED_BACK.value
                undone.finished_at = undone.finished_at or when
            row = RevisionRow(
                host=undone.host,
                **{name: getattr(source, name) for name in (*_COPIED_SETTINGS, *_COPIED_PLAN)},
                proposed_by=None,
                applied_by=who,
                proposed_at=when,
                applied_at=when,
                outcome=Outcome.APPLIED.value,
                failure_lines=[],
                rollback_of=undone.id,
                returned_to=source.id,
            )
            session.add(row)
            session.flush()
            return revision_record(row)

    def revision(self, revision_id: int) -> RevisionRecord:
        with self._read("read a revision") as session:
            return revision_record(get_revision(session, revision_id))

    def history(self, host: str | None = None, limit: int = 20) -> list[RevisionRecord]:
        """Revisions newest first (all hosts when ``host`` is None)."""
        count = v.count("history limit", limit, minimum=1)
        query = select(RevisionRow)
        if host is not None:
            query = query.where(RevisionRow.host == v.text("host", host, HOST))
        query = query.order_by(RevisionRow.proposed_at.desc(), RevisionRow.id.desc()).limit(count)
        with self._read("read the history") as session:
            return [revision_record(row) for row in session.scalars(query)]

    def last_ready_revision(self, host: str) -> RevisionRecord | None:
        """The config a rollback returns to by default: the newest one that became ready."""
        name = v.text("host", host, HOST)
        with self._read("read the last ready revision") as session:
            row = session.scalars(
                select(RevisionRow)
                .where(RevisionRow.host == name, RevisionRow.outcome == Outcome.READY.value)
                .order_by(RevisionRow.finished_at.desc(), RevisionRow.id.desc())
                .limit(1)
            ).one_or_none()
            return None if row is None else revision_record(row)

    def startup_durations(self, host: str, limit: int = 50) -> list[StartupDuration]:
        """Starts of ``host`` that became ready, newest first, for the ETA of the next one."""
        name = v.text("host", host, HOST)
        count = v.count("limit", limit, minimum=1)
        query = (
            select(RevisionRow)
            .where(
                RevisionRow.host == name,
                RevisionRow.outcome.in_([Outcome.READY.value, Outcome.ROLLED_BACK.value]),
                RevisionRow.startup_seconds.is_not(None),
                RevisionRow.failure_kind.is_(None),
                RevisionRow.finished_at.is_not(None),
            )
            .order_by(RevisionRow.finished_at.desc(), RevisionRow.id.desc())
            .limit(count)
        )
        with self._read("read startup durations") as session:
            return [
                StartupDuration(
                    revision_id=row.id,
                    finished_at=row.finished_at,  # type: ignore[arg-type]  # filtered above
                    seconds=row.startup_seconds,  # type: ignore[arg-type]
                    host_gb_per_rank=(
                        row.host_gb_per_rank
                        if row.host_gb_per_rank is not None
                        else row.plan_per_rank_gb
                    ),
                )
                for row in session.scalars(query)
            ]


# The columns a rollback copies from the revision it returns to: exactly those the two column
# builders above write, so a column added there is copied too.
_COPIED_SETTINGS = tuple(_settings_columns(HiCacheSettings(enabled=False)))
_COPIED_PLAN = tuple(_plan_columns(PlanSummary(0.0, 0.0, 0, "fits", "")))
