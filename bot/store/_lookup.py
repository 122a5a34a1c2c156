"""Finding one row by its id, the same way for every table a caller names by id.

The id is checked first (a whole number from 1: :class:`~bot.errors.InputError` otherwise),
then the row is read, ``FOR UPDATE`` when the caller will change it (PostgreSQL locks the row;
SQLite's writes already hold the database), and a missing row raises
:class:`~bot.errors.NotFound` naming what is missing, with where to look when there is a place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.orm import Session

from bot.errors import NotFound
from bot.store import _validate as v
from bot.store._models import (
    Base,
    OperationRow,
    ProposalRow,
    ReportScheduleRow,
    RevisionRow,
    RolloutRow,
)

__all__ = ["row_by_id"]

RowT = TypeVar("RowT", bound=Base)


@dataclass(frozen=True)
class _Named:
    """How errors name a table's rows: the id in an InputError, the row in NotFound."""

    id_name: str
    noun: str
    hint: str = ""
    big: bool = True  # a BigInteger id; False for an Integer one (32-bit)


_NAMES: dict[type[Base], _Named] = {
    OperationRow: _Named("operation id", "operation"),
    ProposalRow: _Named("proposal id", "proposal"),
    ReportScheduleRow: _Named("schedule id", "report schedule"),
    RevisionRow: _Named("revision id", "revision", "; `kimi-ops history` lists them"),
    RolloutRow: _Named("rollout id", "rollout", big=False),
}


def row_by_id(session: Session, model: type[RowT], row_id: object, *, lock: bool = False) -> RowT:
    """The row of ``model`` whose id is ``row_id``, locked for update with ``lock``."""
    named = _NAMES[model]
    rid = v.count(named.id_name, row_id, minimum=1, big=named.big)
    row = session.get(model, rid, with_for_update=lock or None)
    if row is None:
        raise NotFound(f"no {named.noun} {rid} is recorded{named.hint}")
    return row
