"""What every part of the :class:`~bot.store.Store` shares: the engine, sessions, the clock, and
the translation of SQLAlchemy's errors into :class:`StoreError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from bot.clock import Clock, SystemClock
from bot.db import WRITE_OPTION, make_engine, safe_url
from bot.errors import StoreError
from bot.store import _validate as v
from bot.store.migrate import ensure_at_head

__all__ = ["StoreBase"]


class StoreBase:
    """Holds the engine and two session factories: writes begin IMMEDIATE on SQLite."""

    def __init__(
        self,
        url_or_engine: str | URL | Engine,
        *,
        clock: Clock | None = None,
        check_schema: bool = True,
        busy_timeout_s: float = 30.0,
    ) -> None:
        if isinstance(url_or_engine, Engine):
            self._engine, self._owns_engine = url_or_engine, False
        else:
            self._engine, self._owns_engine = make_engine(url_or_engine, busy_timeout_s), True
        self._clock: Clock = clock or SystemClock()
        if check_schema:
            try:
                ensure_at_head(self._engine)
            except BaseException:
                self.close()
                raise
        self._reads = sessionmaker(bind=self._engine, expire_on_commit=False)
        self._writes = sessionmaker(
            bind=self._engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False
        )

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return safe_url(self._engine.url)

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        """Close the pooled connections (only those of an engine this store created)."""
        if self._owns_engine:
            self._engine.dispose()

    def __enter__(self) -> StoreBase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _at(self, at: datetime | None, name: str = "at") -> datetime:
        return self._clock.now() if at is None else v.instant(name, at)

    def _write(self, what: str) -> AbstractContextManager[Session]:
        """One transaction: committed when the block ends, rolled back whole on any error."""
        return self._transaction(self._writes, f"refused to {what}")

    def _read(self, what: str) -> AbstractContextManager[Session]:
        return self._transaction(self._reads, f"failed to {what}")

    @contextmanager
    def _transaction(self, sessions: sessionmaker[Session], failed: str) -> Iterator[Session]:
        """A session in a transaction; a database error becomes a StoreError saying what
        ``failed``, with the database's own first line."""
        try:
            with sessions.begin() as session:
                yield session
        except SQLAlchemyError as exc:
            raise StoreError(f"the database {self.url} {failed}: {_cause(exc)}") from exc


def _cause(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).strip().splitlines()[0]
