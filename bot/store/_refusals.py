"""Refusals: everything kimi-ops said no to, who asked and why (unauthorized users included)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from bot.store import _validate as v
from bot.store._base import StoreBase
from bot.store._convert import refusal_record
from bot.store._lookup import row_by_id
from bot.store._models import CHANNEL, HOST, USER, RefusalRow, RevisionRow
from bot.store.records import RefusalRecord

__all__ = ["RefusalsMixin"]


class RefusalsMixin(StoreBase):
    def record_refusal(
        self,
        user_id: str,
        action: str,
        reason: str,
        *,
        host: str | None = None,
        channel: str | None = None,
        revision_id: int | None = None,
        at: datetime | None = None,
    ) -> RefusalRecord:
        """Record that ``user_id`` asked for ``action`` and was refused because of ``reason``."""
        values = {
            "user_id": v.text("user id", user_id, USER),
            "action": v.text("refused action", action, 10_000),
            "reason": v.text("refusal reason", reason, 10_000),
            "host": v.optional_text("host", host, HOST),
            "channel": v.optional_text("channel", channel, CHANNEL),
        }
        when = self._at(at)
        with self._write("record a refusal") as session:
            rid = None if revision_id is None else row_by_id(session, RevisionRow, revision_id).id
            row = RefusalRow(**values, revision_id=rid, at=when)
            session.add(row)
            session.flush()
            return refusal_record(row)

    def refusals(
        self, *, host: str | None = None, user_id: str | None = None, limit: int = 100
    ) -> list[RefusalRecord]:
        """Refusals newest first, optionally of one host or one user."""
        query = select(RefusalRow)
        if host is not None:
            query = query.where(RefusalRow.host == v.text("host", host, HOST))
        if user_id is not None:
            query = query.where(RefusalRow.user_id == v.text("user id", user_id, USER))
        query = query.order_by(RefusalRow.at.desc(), RefusalRow.id.desc()).limit(
            v.count("limit", limit, minimum=1)
        )
        with self._read("read refusals") as session:
            return [refusal_record(row) for row in session.scalars(query)]
