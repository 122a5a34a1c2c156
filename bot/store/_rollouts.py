"""Fleet rollouts: one row per rollout, one line per replica, saved on every phase change.

The rollout's runner saves its whole view after each change (:meth:`RolloutsMixin.save_rollout`),
so the rows always say where each replica stands; a bot restarted mid-rollout reads the unfinished
ones back (:meth:`RolloutsMixin.unfinished_rollouts`) and carries them on. Starting a proposed
rollout is one write transaction (:meth:`RolloutsMixin.start_rollout`): of two Apply clicks, one
starts it and the other reads who did.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.errors import InputError
from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._lookup import row_by_id
from bot.store._models import CHANNEL, HOST, TS, USER, RolloutReplicaRow, RolloutRow
from bot.store.records import (
    RolloutRecord,
    RolloutReplicaRecord,
)
from bot.vocab import (
    FINAL_ROLLOUT_STATES,
    OperationKind,
    ReplicaPhase,
    RolloutState,
)

__all__ = ["RolloutsMixin"]

_CONFIG = 128


def _line(row: RolloutReplicaRow) -> RolloutReplicaRecord:
    return RolloutReplicaRecord(
        host=row.host,
        url=row.url,
        phase=ReplicaPhase(row.phase),
        planned=row.planned,
        proposal_id=row.proposal_id,
        operation_id=row.agent_operation_id,
        revision=row.agent_revision_id,
        old_config=row.old_config,
        new_config=row.new_config,
        detail=row.detail,
        seconds=row.seconds,
    )


def _record(session: Session, row: RolloutRow) -> RolloutRecord:
    lines = session.scalars(
        select(RolloutReplicaRow)
        .where(RolloutReplicaRow.rollout_id == row.id)
        .order_by(RolloutReplicaRow.position)
    )
    return RolloutRecord(
        id=row.id,
        fleet=row.fleet,
        kind=OperationKind(row.kind),
        change=row.change,
        ratio=row.ratio,
        size_gb=row.size_gb,
        proposed_by=row.proposed_by,
        applied_by=row.applied_by,
        state=RolloutState(row.state),
        reason=row.reason,
        channel=row.channel,
        message_ts=row.message_ts,
        created_at=row.created_at,
        expires_at=row.expires_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        replicas=tuple(_line(line) for line in lines),
    )


def _checked_line(line: RolloutReplicaRecord) -> dict[str, object]:
    return {
        "host": v.text("replica host", line.host, HOST),
        "url": v.text("replica URL", line.url, 2048),
        "phase": v.member("replica phase", ReplicaPhase, line.phase).value,
        "planned": None if line.planned is None else v.free_text("plan shown", line.planned),
        "proposal_id": v.optional_count("proposal id", line.proposal_id, minimum=1, big=False),
        "agent_operation_id": v.optional_count("agent operation id", line.operation_id, 1),
        "agent_revision_id": v.optional_count("agent revision id", line.revision, 1),
        "old_config": v.optional_text("old config", line.old_config, _CONFIG),
        "new_config": v.optional_text("new config", line.new_config, _CONFIG),
        "detail": None if line.detail is None else v.free_text("replica detail", line.detail),
        "seconds": v.optional_finite("replica seconds", line.seconds, minimum=0.0),
    }


class RolloutsMixin(StoreBase):
    def record_rollout(
        self,
        fleet: str,
        kind: OperationKind,
        change: str,
        replicas: Sequence[RolloutReplicaRecord],
        *,
        proposed_by: str,
        state: RolloutState,
        ratio: float | None = None,
        size_gb: int | None = None,
        reason: str | None = None,
        channel: str | None = None,
        expires_at: datetime | None = None,
        at: datetime | None = None,
    ) -> RolloutRecord:
        """A new rollout with its replica lines in rollout order; checked whole before writing."""
        lines = [_checked_line(line) for line in replicas]
        if not lines:
            raise InputError("a rollout needs at least one replica")
        hosts = [str(line["host"]) for line in lines]
        if len(set(hosts)) != len(hosts):
            raise InputError(f"a rollout names a replica twice: {', '.join(hosts)}")
        values = {
            "fleet": v.text("fleet", fleet, HOST),
            "kind": v.member("rollout kind", OperationKind, kind).value,
            "change": v.text("rollout change", change, 128),
            "ratio": v.optional_finite("ratio", ratio, minimum=0.0),
            "size_gb": v.optional_count("size", size_gb, minimum=1, big=False),
            "proposed_by": v.text("proposer", proposed_by, USER),
            "state": v.member("rollout state", RolloutState, state).value,
            "reason": None if reason is None else v.free_text("rollout reason", reason),
            "channel": v.optional_text("channel", channel, CHANNEL),
            "expires_at": None if expires_at is None else v.instant("expires_at", expires_at),
        }
        when = self._at(at)
        with self._write("record a rollout") as session:
            row = RolloutRow(**values, created_at=when)
            if state is RolloutState.RUNNING:
                row.started_at = when
            session.add(row)
            session.flush()
            for position, line in enumerate(lines):
                session.add(RolloutReplicaRow(rollout_id=row.id, position=position, **line))
            session.flush()
            return _record(session, row)

    def rollout(self, rollout_id: int) -> RolloutRecord:
        with self._read("read a rollout") as session:
            return _record(session, row_by_id(session, RolloutRow, rollout_id))

    def save_rollout(
        self,
        rollout_id: int,
        state: RolloutState,
        replicas: Sequence[RolloutReplicaRecord],
        reason: str | None = None,
        at: datetime | None = None,
    ) -> RolloutRecord:
        """Where the rollout and each of its replicas stand now; the end time once it is final."""
        lines = {str(line["host"]): line for line in map(_checked_line, replicas)}
        the_state = v.member("rollout state", RolloutState, state)
        when = self._at(at)
        with self._write("save a rollout's progress") as session:
            row = row_by_id(session, RolloutRow, rollout_id)
            rows = {
                line.host: line
                for line in session.scalars(
                    select(RolloutReplicaRow).where(RolloutReplicaRow.rollout_id == row.id)
                )
            }
            unknown = sorted(set(lines) - set(rows))
            if unknown:
                raise InputError(f"rollout #{rollout_id} has no replica {unknown[0]!r}")
            for host, values in lines.items():
                for name, value in values.items():
                    setattr(rows[host], name, value)
            row.state = the_state.value
            row.reason = None if reason is None else v.free_text("rollout reason", reason)
            if the_state is RolloutState.RUNNING and row.started_at is None:
                row.started_at = when
            if the_state in FINAL_ROLLOUT_STATES and row.ended_at is None:
                row.ended_at = when
            session.flush()
            return _record(session, row)

    def start_rollout(self, rollout_id: int, applied_by: str, at: datetime) -> RolloutRecord:
        """Move a proposed rollout to running for ``applied_by`` (one caller wins); the record as
        it stands afterwards, whoever started it."""
        who, when = v.text("applier", applied_by, USER), v.instant("at", at)
        return self._leave_proposed(
            rollout_id, "start a rollout", RolloutState.RUNNING, applied_by=who, started_at=when
        )

    def cancel_rollout(self, rollout_id: int, reason: str, at: datetime) -> RolloutRecord:
        """End a proposed rollout cancelled, saying why ("cancelled by U1", "expired ..."); one
        already started or ended is left as it stands. The record as it stands afterwards."""
        why, when = v.free_text("rollout reason", reason), v.instant("at", at)
        return self._leave_proposed(
            rollout_id, "cancel a proposed rollout", RolloutState.CANCELLED, reason=why,
            ended_at=when,
        )  # fmt: skip

    def _leave_proposed(
        self, rollout_id: int, doing: str, state: RolloutState, **values: object
    ) -> RolloutRecord:
        """One write: a rollout still proposed takes ``state`` and ``values``; any other is left
        as it stands (of two callers, the first wins and the second reads what it did)."""
        with self._write(doing) as session:
            row = row_by_id(session, RolloutRow, rollout_id)
            if row.state == RolloutState.PROPOSED.value:
                row.state = state.value
                for name, value in values.items():
                    setattr(row, name, value)
                session.flush()
            return _record(session, row)

    def expire_rollouts(self, now: datetime) -> list[RolloutRecord]:
        """End cancelled every proposed rollout whose Apply window closed by ``now`` (the reason
        says it expired, and when); the rollouts so ended, oldest first."""
        when = v.instant("now", now)
        query = (
            select(RolloutRow)
            .where(
                RolloutRow.state == RolloutState.PROPOSED.value,
                RolloutRow.expires_at.is_not(None),
                RolloutRow.expires_at <= when,
            )
            .order_by(RolloutRow.id)
        )
        with self._write("expire proposed rollouts") as session:
            ended = []
            for row in session.scalars(query):
                assert row.expires_at is not None
                row.state = RolloutState.CANCELLED.value
                row.reason = f"expired at {row.expires_at:%Y-%m-%d %H:%M} UTC before it was applied"
                row.ended_at = when
                ended.append(row)
            session.flush()
            return [_record(session, row) for row in ended]

    def set_rollout_message(self, rollout_id: int, channel: str, message_ts: str) -> None:
        """The message that shows the rollout (edited in place as it goes)."""
        with self._write("record a rollout's message") as session:
            row = row_by_id(session, RolloutRow, rollout_id)
            row.channel = v.text("channel", channel, CHANNEL)
            row.message_ts = v.text("message ts", message_ts, TS)

    def unfinished_rollouts(self) -> list[RolloutRecord]:
        """Rollouts that were running when their bot stopped, oldest first."""
        query = (
            select(RolloutRow)
            .where(RolloutRow.state == RolloutState.RUNNING.value)
            .order_by(RolloutRow.id)
        )
        with self._read("read unfinished rollouts") as session:
            return [_record(session, row) for row in session.scalars(query)]

    def last_rollout(self, fleet: str) -> RolloutRecord | None:
        """The newest rollout of ``fleet`` that touched a replica (started), if any."""
        query = (
            select(RolloutRow)
            .where(
                RolloutRow.fleet == v.text("fleet", fleet, HOST),
                RolloutRow.started_at.is_not(None),
            )
            .order_by(RolloutRow.id.desc())
            .limit(1)
        )
        with self._read("read a fleet's last rollout") as session:
            row = session.scalars(query).first()
            return None if row is None else _record(session, row)

    def rollout_by_proposal(self, proposal_id: int) -> RolloutRecord | None:
        """The rollout one of whose replicas ``proposal_id`` is, if any."""
        query = select(RolloutReplicaRow.rollout_id).where(
            RolloutReplicaRow.proposal_id == v.count("proposal id", proposal_id, minimum=1)
        )
        with self._read("read a proposal's rollout") as session:
            found = session.scalars(query.limit(1)).first()
            return (
                None if found is None else _record(session, row_by_id(session, RolloutRow, found))
            )
