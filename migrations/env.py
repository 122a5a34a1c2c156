"""Alembic environment for kimi-ops; run through :mod:`bot.store.migrate`, never ``fileConfig``.

``logging.config.fileConfig`` would disable every logger that exists when the bot migrates at
start, so logging is left to the process. The connection (inside a transaction, foreign keys
handled) comes from ``config.attributes["connection"]``; for a developer's plain ``alembic``
command without one, ``sqlalchemy.url`` (or ``sqlite:///kimi-ops.db``) is used.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.sql.schema import SchemaItem

from bot.db import make_engine
from bot.store._models import Base
from bot.store.config import DEFAULT_URL
from bot.store.migrate import FOREIGN_TABLES, include_name


def include_object(
    obj: SchemaItem, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    return not (type_ == "table" and name in FOREIGN_TABLES)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        include_name=include_name,
        include_object=include_object,
        # SQLite cannot ALTER most things: later migrations re-create tables in batch mode.
        render_as_batch=True,
        compare_type=True,
    )


def run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(context.config.get_main_option("sqlalchemy.url") or DEFAULT_URL)
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


def run_offline() -> None:
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url") or DEFAULT_URL,
        target_metadata=Base.metadata,
        literal_binds=True,
        include_name=include_name,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
