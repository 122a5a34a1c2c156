"""Revisions and proposals: the audit of every configuration asked for, and what became of it.

A revision's life: ``proposed`` -> ``applied`` -> ``ready`` | ``failed``; a proposal may also end
``cancelled``, ``expired`` or ``refused``; ``failed`` (or a ``ready`` config someone later
undid) becomes ``rolled_back`` when a rollback revision returns the host to an earlier config.
Recording the outcome a revision already has is a no-op: the first record wins, so a bot that
resumes watching after a restart cannot rewrite the audit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.errors import InputError
from bot.hicache import HiCacheSetting
from bot.planner import Verdict
from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._convert import proposal_record, revision_record
from bot.store._lookup import row_by_id
from bot.store._models import (
    CHANNEL,
    HOST,
    TS,
    USER,
    ProposalReplicaRow,
    ProposalRow,
    RevisionRow,
)
from bot.store.records import (
    FINAL_OUTCOMES,
    FleetProposalRecord,
    FleetReplicaProposal,
    PlanSummary,
    ProposalRecord,
    RevisionKind,
    RevisionOutcome,
    RevisionRecord,
)
from bot.vocab import FailureKind

__all__ = ["RevisionsMixin"]

_NEXT: dict[RevisionOutcome, frozenset[RevisionOutcome]] = {
    RevisionOutcome.PROPOSED: frozenset(
        {
            RevisionOutcome.CANCELLED,
            RevisionOutcome.EXPIRED,
            RevisionOutcome.REFUSED,
            RevisionOutcome.APPLIED,
            RevisionOutcome.UNCHANGED,
        }
    ),
    RevisionOutcome.APPLIED: frozenset(
        {
            RevisionOutcome.READY,
            RevisionOutcome.FAILED,
            RevisionOutcome.ROLLED_BACK,
            RevisionOutcome.REFUSED,
            RevisionOutcome.UNCHANGED,
        }
    ),
    RevisionOutcome.READY: frozenset({RevisionOutcome.ROLLED_BACK}),
    RevisionOutcome.FAILED: frozenset({RevisionOutcome.ROLLED_BACK}),
}


def _check_transition(row: RevisionRow, target: RevisionOutcome) -> None:
    current = RevisionOutcome(row.outcome)
    allowed = _NEXT.get(current, frozenset())
    if target not in allowed:
        options = ", ".join(sorted(o.value for o in allowed)) or "nothing (it is final)"
        raise InputError(
            f"revision {row.id} is {current.value!r}; it cannot become {target.value!r} "
            f"(from {current.value!r} it can become: {options})"
        )


def _settings_columns(settings: HiCacheSetting) -> dict[str, Any]:
    if not isinstance(settings, HiCacheSetting):
        raise InputError(f"settings must be a HiCacheSetting, not {type(settings).__name__}")
    if not isinstance(settings.enabled, bool):
        raise InputError(f"settings.enabled must be true or false, not {settings.enabled!r}")
    return {
        "hicache_enabled": settings.enabled,
        "hicache_ratio": v.optional_finite("hicache ratio", settings.ratio, minimum=0),
        "hicache_size_gb": v.optional_count("hicache size (GB)", settings.size_gb, big=False),
        "hicache_write_policy": v.optional_text("write policy", settings.write_policy, 64),
        "hicache_io_backend": v.optional_text("io backend", settings.io_backend, 64),
    }


def _plan_columns(plan: PlanSummary) -> dict[str, Any]:
    if not isinstance(plan, PlanSummary):
        raise InputError(f"plan must be a PlanSummary, not {type(plan).__name__}")
    return {
        "plan": v.json_object("plan detail", plan.detail),
        "plan_per_rank_gb": v.optional_finite("plan per-rank GB", plan.per_rank_gb, minimum=0),
        "plan_total_gb": v.optional_finite("plan total GB", plan.total_gb, minimum=0),
        "plan_per_rank_tokens": v.optional_count("plan per-rank tokens", plan.per_rank_tokens),
        "plan_verdict": v.member("plan verdict", Verdict, plan.verdict).value,
        "plan_reason": v.free_text("plan reason", plan.reason),
    }


class RevisionsMixin(StoreBase):
    def record_revision(
        self,
        host: str,
        settings: HiCacheSetting,
        plan: PlanSummary,
        *,
        proposed_by: str | None,
        outcome: RevisionOutcome | str = RevisionOutcome.PROPOSED,
        at: datetime | None = None,
        rollback_of: int | None = None,
        returned_to: int | None = None,
        command_line: Iterable[str] = (),
        kind: RevisionKind | str = RevisionKind.CHANGE,
    ) -> RevisionRecord:
        """Record a configuration asked for (``proposed``, or ``refused`` straight away), a
        change unless ``kind`` says it is a restart or a rollback. A fleet's refusal records a
        ``refused`` revision for each replica it names (a plan of None figures and the reason
        when the replica could not be planned at all: an agent that did not answer)."""
        start = v.member("outcome", RevisionOutcome, outcome)
        what = v.member("kind", RevisionKind, kind)
        if start not in (RevisionOutcome.PROPOSED, RevisionOutcome.REFUSED):
            raise InputError(
                f"a new revision starts 'proposed' or 'refused', not {start.value!r}; "
                "record_apply and record_outcome move it on"
            )
        argv = v.text_list("command line", command_line)
        when = self._at(at)
        with self._write("record a revision") as session:
            row = self._new_revision(
                session, host, settings, plan, proposed_by, when, rollback_of, returned_to
            )
            row.command_line = argv
            row.outcome = start.value
            row.kind = what.value
            row.finished_at = when if start in FINAL_OUTCOMES else None
            session.flush()
            return revision_record(row)

    def _new_revision(
        self,
        session: Session,
        host: str,
        settings: HiCacheSetting,
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
            outcome=RevisionOutcome.PROPOSED.value,
            command_line=[],
            failure_lines=[],
        )
        for name, ref in (("rollback_of", rollback_of), ("returned_to", returned_to)):
            if ref is not None:
                target = row_by_id(session, RevisionRow, ref)
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
        settings: HiCacheSetting,
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
        command_line: Iterable[str] = (),
    ) -> ProposalRecord:
        """Record a proposal shown in Slack and its revision (``proposed``), in one transaction.

        ``command_line`` is the argv the change would run, when already known."""
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
        argv = v.text_list("command line", command_line)
        with self._write("record a proposal") as session:
            revision = self._new_revision(
                session, host, settings, plan, proposed_by, when, None, returned_to
            )
            revision.command_line = argv
            if returned_to is not None:
                revision.kind = RevisionKind.ROLLBACK.value
            session.flush()
            row = ProposalRow(revision_id=revision.id, expires_at=expiry, created_at=when, **values)
            session.add(row)
            session.flush()
            return proposal_record(row)

    def record_fleet_proposal(
        self,
        fleet: str,
        replicas: Sequence[FleetReplicaProposal],
        *,
        proposed_by: str,
        channel: str,
        expires_at: datetime,
        message_ts: str | None = None,
        at: datetime | None = None,
    ) -> FleetProposalRecord:
        """Record one proposal over a whole fleet, in one transaction: a ``proposed`` revision
        per replica (``refused`` where its plan was refused), ONE proposal (one id for people
        to apply or cancel; its ``revision_id`` and fingerprint are the first replica's) and
        the link from it to every replica's revision (:meth:`fleet_proposal_revisions`)."""
        name = v.text("fleet", fleet, HOST)
        if not replicas:
            raise InputError(f"fleet {name} has no replica to propose a change to")
        hosts = [v.text("host", replica.host, HOST) for replica in replicas]
        if len(set(hosts)) != len(hosts):
            raise InputError(f"fleet {name} names a host twice: {', '.join(hosts)}")
        when = self._at(at)
        expiry = v.instant("expires_at", expires_at)
        if expiry <= when:
            raise InputError(
                f"expires_at {expiry.isoformat()} is not after the proposal time "
                f"{when.isoformat()}; a proposal must be open for some time"
            )
        v.text("proposed by (Slack user id)", proposed_by, USER)
        first = replicas[0]
        values = {
            "channel": v.text("channel", channel, CHANNEL),
            "message_ts": v.optional_text("message ts", message_ts, TS),
            "fingerprint": v.text("fingerprint", first.fingerprint, 128),
            "requested": {"fleet": name, **v.json_object("requested change", first.requested)},
        }
        with self._write("record a fleet proposal") as session:
            rows = []
            for replica in replicas:
                row = self._new_revision(
                    session, replica.host, replica.settings, replica.plan, proposed_by, when,
                    None, None,
                )  # fmt: skip
                row.command_line = v.text_list("command line", replica.command_line)
                if replica.plan.verdict is Verdict.REFUSED:
                    row.outcome, row.finished_at = RevisionOutcome.REFUSED.value, when
                rows.append(row)
            session.flush()
            proposal = ProposalRow(
                revision_id=rows[0].id, expires_at=expiry, created_at=when, **values
            )
            session.add(proposal)
            session.flush()
            for host, row in zip(hosts, rows, strict=True):
                session.add(
                    ProposalReplicaRow(proposal_id=proposal.id, host=host, revision_id=row.id)
                )
            session.flush()
            return FleetProposalRecord(
                proposal=proposal_record(proposal),
                revisions={host: row.id for host, row in zip(hosts, rows, strict=True)},
            )

    def fleet_proposal_revisions(self, proposal_id: int) -> dict[str, RevisionRecord]:
        """Each replica's revision of fleet proposal ``proposal_id``, by host in the order
        proposed; empty for a single-host proposal."""
        with self._read("read a fleet proposal") as session:
            row_by_id(session, ProposalRow, proposal_id)
            found = session.execute(
                select(ProposalReplicaRow.host, RevisionRow)
                .join(RevisionRow, RevisionRow.id == ProposalReplicaRow.revision_id)
                .where(ProposalReplicaRow.proposal_id == proposal_id)
                .order_by(ProposalReplicaRow.id)
            ).all()
            return {host: revision_record(row) for host, row in found}

    def record_apply(
        self, revision_id: int, applied_by: str, at: datetime | None = None
    ) -> RevisionRecord:
        """A person applied the revision and the agent accepted it: ``proposed`` -> ``applied``."""
        who = v.text("applied by (Slack user id)", applied_by, USER)
        when = self._at(at)
        with self._write("record an apply") as session:
            row = row_by_id(session, RevisionRow, revision_id, lock=True)
            if row.outcome == RevisionOutcome.APPLIED.value:
                return revision_record(row)
            _check_transition(row, RevisionOutcome.APPLIED)
            row.outcome, row.applied_by, row.applied_at = RevisionOutcome.APPLIED.value, who, when
            return revision_record(row)

    def record_outcome(
        self,
        revision_id: int,
        outcome: RevisionOutcome | str,
        *,
        at: datetime | None = None,
        startup_seconds: float | None = None,
        device_tokens: int | None = None,
        host_gb_per_rank: float | None = None,
        host_tokens_per_rank: int | None = None,
        failure_kind: FailureKind | str | None = None,
        failure_lines: Iterable[str] = (),
    ) -> RevisionRecord:
        """Record where a revision ended: cancelled, expired, refused, ready, failed, rolled_back.

        Figures reached (startup seconds, device tokens, host GB and tokens per rank) go with
        ``ready`` or ``failed``; the failure kind and its decisive log lines with ``failed``.
        """
        target = v.member("outcome", RevisionOutcome, outcome)
        if target in (RevisionOutcome.PROPOSED, RevisionOutcome.APPLIED):
            raise InputError(
                f"outcome {target.value!r} is not an end; use record_revision / record_apply"
            )
        figures = {
            "startup_seconds": v.optional_finite("startup seconds", startup_seconds, minimum=0),
            "device_tokens": v.optional_count("device tokens", device_tokens),
            "host_gb_per_rank": v.optional_finite("host GB per rank", host_gb_per_rank, 0),
            "host_tokens_per_rank": v.optional_count("host tokens per rank", host_tokens_per_rank),
        }
        kind = v.optional_member("failure kind", FailureKind, failure_kind)
        lines = v.text_list("failure lines", failure_lines)
        if target not in (RevisionOutcome.READY, RevisionOutcome.FAILED) and any(
            value is not None for value in figures.values()
        ):
            raise InputError(
                f"startup figures belong to a 'ready' or 'failed' outcome, not {target.value!r}"
            )
        if target is not RevisionOutcome.FAILED and (kind is not None or lines):
            raise InputError(f"a failure kind and lines belong to 'failed', not {target.value!r}")
        when = self._at(at)
        with self._write("record an outcome") as session:
            row = row_by_id(session, RevisionRow, revision_id, lock=True)
            if row.outcome == target.value:
                # The first record wins; a later one only adds the figures it lacked (a fleet
                # records a replica ready, then the agent's report brings what it logged).
                for name, value in figures.items():
                    if value is not None and getattr(row, name) is None:
                        setattr(row, name, value)
                return revision_record(row)
            _check_transition(row, target)
            row.outcome = target.value
            # A rollback keeps the time the revision's own start ended, if it had one.
            if target is not RevisionOutcome.ROLLED_BACK or row.finished_at is None:
                row.finished_at = when
            for name, value in figures.items():
                if value is not None:
                    setattr(row, name, value)
            if target is RevisionOutcome.FAILED:
                row.failure_kind = None if kind is None else kind.value
                row.failure_lines = lines
            return revision_record(row)

    def record_rollback(
        self,
        rollback_of: int,
        returned_to: int,
        *,
        applied_by: str | None = None,
        at: datetime | None = None,
        agent_revision_id: int | None = None,
    ) -> RevisionRecord:
        """The host returns to ``returned_to``'s config after ``rollback_of``: one transaction
        marks ``rollback_of`` rolled back and records the rollback as a new ``applied`` revision
        (settings, command line and plan copied from ``returned_to``; ``applied_by`` None: the
        agent did it). ``agent_revision_id`` is the agent's id of the rollback's own start; its
        ``agent_returned_to`` is ``returned_to``'s agent id."""
        who = v.optional_text("applied by (Slack user id)", applied_by, USER)
        agent_id = v.optional_count("agent revision id", agent_revision_id, minimum=1)
        when = self._at(at)
        with self._write("record a rollback") as session:
            undone = row_by_id(session, RevisionRow, rollback_of, lock=True)
            source = row_by_id(session, RevisionRow, returned_to)
            if source.host != undone.host:
                raise InputError(
                    f"revision {source.id} is of host {source.host!r}, not {undone.host!r}; "
                    "a rollback stays on its host"
                )
            if source.id == undone.id:
                raise InputError(f"revision {undone.id} cannot be rolled back to itself")
            if RevisionOutcome(source.outcome) not in (
                RevisionOutcome.READY,
                RevisionOutcome.ROLLED_BACK,
            ):
                raise InputError(
                    f"revision {source.id} is {source.outcome!r}; a rollback returns to a config "
                    "that ran (ready, or rolled back since)"
                )
            if undone.outcome != RevisionOutcome.ROLLED_BACK.value:
                _check_transition(undone, RevisionOutcome.ROLLED_BACK)
                undone.outcome = RevisionOutcome.ROLLED_BACK.value
                undone.finished_at = undone.finished_at or when
            row = RevisionRow(
                host=undone.host,
                **{name: getattr(source, name) for name in (*_COPIED_SETTINGS, *_COPIED_PLAN)},
                proposed_by=None,
                applied_by=who,
                proposed_at=when,
                applied_at=when,
                outcome=RevisionOutcome.APPLIED.value,
                failure_lines=[],
                rollback_of=undone.id,
                returned_to=source.id,
                agent_revision_id=agent_id,
                agent_returned_to=source.agent_revision_id,
                kind=RevisionKind.ROLLBACK.value,
            )
            session.add(row)
            session.flush()
            return revision_record(row)

    def link_rollback(self, revision_id: int, rollback_of: int) -> RevisionRecord:
        """A rollback proposal (``returned_to`` set when proposed) started on the host, undoing
        ``rollback_of``, the revision running there then; its ``agent_returned_to`` becomes
        ``returned_to``'s agent id. Linking the same again is a no-op; another is refused."""
        with self._write("link a rollback") as session:
            row = row_by_id(session, RevisionRow, revision_id, lock=True)
            if row.returned_to is None:
                raise InputError(
                    f"revision {row.id} returns to no revision; only a rollback undoes one"
                )
            if row.rollback_of == rollback_of:
                return revision_record(row)
            if row.rollback_of is not None:
                raise InputError(
                    f"revision {row.id} already rolls back revision {row.rollback_of}, "
                    f"not {rollback_of}"
                )
            undone = row_by_id(session, RevisionRow, rollback_of)
            if undone.host != row.host or undone.id == row.id:
                raise InputError(
                    f"revision {undone.id} of host {undone.host!r} cannot be what revision "
                    f"{row.id} of {row.host!r} rolls back; a rollback stays on its host"
                )
            row.rollback_of = undone.id
            row.agent_returned_to = row_by_id(
                session, RevisionRow, row.returned_to
            ).agent_revision_id
            return revision_record(row)

    def record_agent_revision(
        self, revision_id: int, agent_revision_id: int, command_line: Iterable[str]
    ) -> RevisionRecord:
        """The agent accepted the revision as its own revision ``agent_revision_id`` and wrote
        ``command_line`` for it. Recording the same again is a no-op; another id is refused."""
        agent_id = v.count("agent revision id", agent_revision_id, minimum=1)
        argv = v.text_list("command line", command_line)
        if not argv:
            raise InputError("the agent's command line is empty; give the argv it wrote")
        with self._write("record an agent revision") as session:
            row = row_by_id(session, RevisionRow, revision_id, lock=True)
            if row.agent_revision_id not in (None, agent_id):
                raise InputError(
                    f"revision {row.id} is already the agent's revision {row.agent_revision_id}, "
                    f"not {agent_id}; one store revision stands for one start"
                )
            row.agent_revision_id, row.command_line = agent_id, argv
            return revision_record(row)


# The columns a rollback copies from the revision it returns to: exactly those the two column
# builders above write, so a column added there is copied too.
_COPIED_SETTINGS = (*_settings_columns(HiCacheSetting(enabled=False)), "command_line")
_COPIED_PLAN = tuple(_plan_columns(PlanSummary(None, None, None, Verdict.FITS, "")))
