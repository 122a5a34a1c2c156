"""The rows one write adds, on a connection inside the caller's transaction, so a method of
``AgentState`` can add several in one transaction (``record_operation``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.agent.state._schema import events as _events
from bot.agent.state._schema import operations as _operations
from bot.agent.state._schema import revisions as _revisions
from bot.agent.state.views import ProgressEvent, RevisionOutcome
from bot.vocab import EventPhase, OperationKind, OperationState

__all__ = ["insert_event", "insert_operation", "insert_revision"]


def insert_operation(
    conn: Connection,
    *,
    kind: OperationKind,
    actor: str,
    created_at: str,
    request: Mapping[str, Any],
    plan: Mapping[str, Any] | None,
    revision: int | None = None,
    rollback_of: int | None = None,
    state: OperationState = OperationState.RUNNING,
    caller: str | None = None,
) -> int:
    result = conn.execute(
        _operations.insert().values(
            kind=OperationKind(kind).value,
            state=OperationState(state).value,
            actor=actor,
            created_at=created_at,
            request=dict(request),
            plan=None if plan is None else dict(plan),
            revision=revision,
            rollback_of=rollback_of,
            caller=caller,
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def insert_revision(
    conn: Connection,
    *,
    argv: Sequence[str],
    hicache: Mapping[str, Any],
    created_at: str,
    actor: str,
    kind: str,
    outcome: RevisionOutcome = RevisionOutcome.PENDING,
    became_ready: bool = False,
    rollback_of: int | None = None,
    operation_id: int | None = None,
    device_tokens: int | None = None,
    kv_bytes_per_token: float | None = None,
) -> int:
    result = conn.execute(
        _revisions.insert().values(
            argv=list(argv),
            hicache=dict(hicache),
            outcome=RevisionOutcome(outcome).value,
            became_ready=became_ready,
            created_at=created_at,
            actor=actor,
            kind=kind,
            rollback_of=rollback_of,
            operation_id=operation_id,
            device_tokens=device_tokens,
            kv_bytes_per_token=kv_bytes_per_token,
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def insert_event(
    conn: Connection,
    op_id: int,
    *,
    at: str,
    phase: EventPhase,
    message: str,
    progress: float,
    data: Mapping[str, Any] | None,
) -> ProgressEvent:
    """The next event of ``op_id``, numbered after the last one."""
    payload = json.loads(json.dumps(dict(data or {}), default=str))
    last = conn.execute(
        sa.select(sa.func.max(_events.c.seq)).where(_events.c.op_id == op_id)
    ).scalar()
    seq = int(last or 0) + 1
    conn.execute(
        _events.insert().values(
            op_id=op_id,
            seq=seq,
            at=at,
            phase=EventPhase(phase).value,
            message=message,
            progress=progress,
            data=payload,
        )
    )
    return ProgressEvent(seq, at, EventPhase(phase), message, progress, payload)
