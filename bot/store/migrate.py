"""Schema migrations, driven from code so ``kimi-ops db`` and the bot work from any directory.

Alembic is configured here (no ``alembic.ini``): the scripts are found by :func:`find_migrations`
(inside the installed package, or beside it in a source tree), and the connection is handed to
their ``env.py`` through ``Config.attributes``. Each run is one transaction. On SQLite it runs
with foreign keys OFF (a batch migration re-creates tables, and with foreign keys ON the drop
would delete child rows through ON DELETE CASCADE) and ends with ``PRAGMA foreign_key_check``:
any dangling reference aborts the run and rolls everything back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from bot.db import WRITE_OPTION, make_engine, safe_url
from bot.errors import InputError, MigrationError

__all__ = [
    "FOREIGN_TABLES",
    "MIGRATIONS_DIR",
    "current_revision",
    "downgrade",
    "ensure_at_head",
    "find_migrations",
    "head_revision",
    "include_name",
    "migration_locations",
    "upgrade",
    "upgrade_to_head",
]


def migration_locations(package_dir: Path) -> tuple[Path, Path]:
    """Where the scripts may be, in the order they are tried, for the ``bot`` package at
    ``package_dir``: inside it (a wheel ships ``migrations/`` as ``bot/migrations``), then beside
    it (a source tree, where an editable install maps ``bot.migrations`` without copying)."""
    return package_dir / "migrations", package_dir.parent / "migrations"


def find_migrations(package_dir: Path) -> Path:
    """The first of :func:`migration_locations` that holds ``env.py``.

    Raises :class:`MigrationError` naming every place it looked when none does.
    """
    locations = migration_locations(package_dir)
    found = _first_with_env(locations)
    if found is not None:
        return found
    looked = " and ".join(str(location) for location in locations)
    raise MigrationError(
        f"the migration scripts are not in {looked}; reinstall kimi-ops (a wheel ships them as "
        "bot/migrations, a source checkout keeps them in migrations/ beside bot/)"
    )


def _first_with_env(locations: tuple[Path, ...]) -> Path | None:
    return next((place for place in locations if (place / "env.py").is_file()), None)


_PACKAGE_DIR = Path(__file__).resolve().parents[1]

# Where this install's scripts are. When there are none, the place a wheel puts them, so importing
# this module never fails: every command that needs them goes through find_migrations and stops
# there with the places it looked.
MIGRATIONS_DIR = (
    _first_with_env(migration_locations(_PACKAGE_DIR)) or migration_locations(_PACKAGE_DIR)[0]
)

# Tables that share the database but are not ours: APScheduler's job store.
FOREIGN_TABLES = frozenset({"apscheduler_jobs"})


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic's ``include_name`` hook: autogenerate compares kimi-ops' own tables only."""
    return not (type_ == "table" and name in FOREIGN_TABLES)


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(find_migrations(_PACKAGE_DIR)))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration this code knows."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:  # pragma: no cover - the first revision ships with the code
        where = find_migrations(_PACKAGE_DIR) / "versions"
        raise MigrationError(f"no migration scripts in {where}")
    return head


@contextmanager
def _engine_for(engine_or_url: Engine | str | URL) -> Iterator[Engine]:
    if isinstance(engine_or_url, Engine):
        yield engine_or_url
        return
    engine = make_engine(engine_or_url)
    try:
        yield engine
    finally:
        engine.dispose()


def current_revision(engine_or_url: Engine | str | URL) -> str | None:
    """The migration the database is at (None: an empty database)."""
    with _engine_for(engine_or_url) as engine:
        try:
            with engine.connect() as conn:
                return MigrationContext.configure(conn).get_current_revision()
        except SQLAlchemyError as exc:
            raise MigrationError(
                f"cannot read the schema revision of {safe_url(engine.url)}: {exc}"
            ) from exc


def ensure_at_head(engine_or_url: Engine | str | URL) -> None:
    """Raise :class:`MigrationError` unless the database is at :func:`head_revision`."""
    with _engine_for(engine_or_url) as engine:
        current, head = current_revision(engine), head_revision()
        if current != head:
            raise MigrationError(
                f"the database {safe_url(engine.url)} is at schema revision "
                f"{current or 'none (empty)'}, this kimi-ops needs {head}; "
                "run `kimi-ops db upgrade` first"
            )


def upgrade(engine_or_url: Engine | str | URL, revision: str = "head") -> str | None:
    """Migrate up to ``revision``; returns the revision the database is at afterwards."""
    return _migrate(engine_or_url, revision, lambda cfg: command.upgrade(cfg, revision))


def upgrade_to_head(engine_or_url: Engine | str | URL) -> str | None:
    """What the bot and the demo call on start: bring the schema to the newest revision."""
    return upgrade(engine_or_url, "head")


def downgrade(engine_or_url: Engine | str | URL, revision: str) -> str | None:
    """Migrate down to ``revision`` (``base``: drop everything); returns where it ended."""
    return _migrate(engine_or_url, revision, lambda cfg: command.downgrade(cfg, revision))


def _migrate(
    engine_or_url: Engine | str | URL, revision: str, step: Callable[[Config], None]
) -> str | None:
    if not revision.strip():
        raise InputError("migration revision is empty; give a revision id, 'head' or 'base'")
    with _engine_for(engine_or_url) as engine:
        sqlite = engine.dialect.name == "sqlite"
        try:
            with engine.connect() as conn:
                conn.execution_options(**{WRITE_OPTION: True})
                if sqlite:
                    _pragma(conn, "PRAGMA foreign_keys = OFF")
                try:
                    with conn.begin():
                        step(_config(conn))
                        if sqlite:
                            _check_foreign_keys(conn, engine)
                finally:
                    if sqlite:
                        _pragma(conn, "PRAGMA foreign_keys = ON")
        except CommandError as exc:
            raise InputError(
                f"cannot migrate {safe_url(engine.url)} to {revision!r}: {exc} "
                "(use 'head', 'base' or a revision id from `kimi-ops db current`)"
            ) from exc
        except SQLAlchemyError as exc:
            raise MigrationError(
                f"migrating {safe_url(engine.url)} to {revision!r} failed and was rolled back: "
                f"{exc}"
            ) from exc
        return current_revision(engine)


def _pragma(conn: Connection, statement: str) -> None:
    # Outside any transaction (SQLite ignores foreign_keys changes inside one), on the raw
    # connection so SQLAlchemy does not begin a transaction first.
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(statement)
    finally:
        cursor.close()


def _check_foreign_keys(conn: Connection, engine: Engine) -> None:
    rows = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if rows:
        shown = "; ".join(f"{row[0]} rowid {row[1]} -> {row[2]}" for row in rows[:5])
        raise MigrationError(
            f"migration of {safe_url(engine.url)} left {len(rows)} dangling foreign key(s) "
            f"({shown}); nothing was changed"
        )
