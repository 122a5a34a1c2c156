"""Migrations: every revision keeps existing rows, the cycle up/down/up works, the schema matches
the models, and SQLite migrations stop on dangling foreign keys.

For a new migration NNNN: add ``SEED_ROWS["NNNN"]`` (rows for every table as they stand at NNNN);
``test_upgrade_from_every_revision_keeps_rows`` then fills NNNN's tables, upgrades to head and
checks that nothing was lost. The test fails until the seed rows exist. A migration that converts
a column on purpose (text to integer) says how an old value reads afterwards in ``CONVERTED``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, MetaData, insert, inspect, select, text
from sqlalchemy.exc import DatabaseError

from bot.db import make_engine
from bot.errors import InputError, MigrationError
from bot.store import Store, current_revision, downgrade, head_revision, upgrade, upgrade_to_head
from bot.store._models import Base
from bot.store.migrate import MIGRATIONS_DIR, include_name

T0 = datetime(2026, 2, 24, 11, 18, 37, 123456, tzinfo=UTC)
T1 = datetime(2026, 2, 24, 11, 29, 39, 654321, tzinfo=UTC)
AWKWARD = 'quote " comma , newline \n tab \t unicode ✓ Kimi-K2.5'

# Rows for every table, as the schema stands at each revision (raw column values).
SEED_ROWS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "0001": {
        "revisions": [
            {"id": 1, "host": "kimi-01", "hicache_enabled": True, "hicache_ratio": 0.1 + 0.2,
             "hicache_size_gb": 48, "hicache_write_policy": "write_through",
             "hicache_io_backend": "kernel", "command_line": ["python", "-m", AWKWARD],
             "plan": {"nested": {"list": [1, 2.5, None, "x"]}, "ranks": 8},
             "plan_per_rank_gb": 48.000062592, "plan_total_gb": 384.000500736,
             "plan_per_rank_tokens": 683_061, "plan_verdict": "fits", "plan_reason": AWKWARD,
             "proposed_by": "U0BEN", "applied_by": "U0ANA", "proposed_at": T0,
             "applied_at": T0, "finished_at": T1, "outcome": "failed",
             "startup_seconds": 662.25, "device_tokens": 2**62, "host_gb_per_rank": 44.77,
             "host_tokens_per_rank": 683_061, "failure_kind": "host_memory",
             "failure_lines": ["Not enough host memory available.", AWKWARD],
             "rollback_of": None, "returned_to": None},
            {"id": 2, "host": "kimi-01", "hicache_enabled": False, "hicache_ratio": None,
             "hicache_size_gb": None, "hicache_write_policy": None, "hicache_io_backend": None,
             "command_line": [], "plan": {}, "plan_per_rank_gb": 0.0, "plan_total_gb": 0.0,
             "plan_per_rank_tokens": 0, "plan_verdict": "fits", "plan_reason": "",
             "proposed_by": None, "applied_by": None, "proposed_at": T1, "applied_at": T1,
             "finished_at": None, "outcome": "applied", "startup_seconds": None,
             "device_tokens": None, "host_gb_per_rank": None, "host_tokens_per_rank": None,
             "failure_kind": None, "failure_lines": [], "rollback_of": 1, "returned_to": 1},
        ],
        "proposals": [
            {"id": 1, "revision_id": 1, "channel": "C0OPS", "message_ts": "1771931917.000100",
             "expires_at": T1, "fingerprint": "sha256:feed", "requested": {"size": 48},
             "created_at": T0},
        ],
        "operations": [
            {"id": 1, "agent_operation_id": "7", "host": "kimi-01", "kind": "resize",
             "state": "failed", "channel": "C0OPS", "message_ts": "1771931918.000200",
             "revision_id": 1, "last_event_seq": 2, "started_at": T0, "finished_at": T1},
        ],
        "operation_events": [
            {"id": 1, "operation_id": 1, "seq": 1, "at": T0, "phase": "stopping",
             "message": "stopping", "progress": None, "data": {}},
            {"id": 2, "operation_id": 1, "seq": 2, "at": T1, "phase": "load_weights",
             "message": AWKWARD, "progress": 0.453125, "data": {"shard": 29, "shards": 64}},
        ],
        "refusals": [
            {"id": 1, "at": T0, "user_id": "U0MALLORY", "action": "apply 1",
             "reason": AWKWARD, "host": "kimi-01", "channel": "C0OPS", "revision_id": 1},
        ],
        "capacity_samples": [
            {"id": 1, "host": "kimi-01", "at": T0, "ram_total_bytes": 449 * 10**9,
             "ram_available_bytes": 445 * 10**9, "hicache_host_bytes": 384_000_500_736,
             "device_tokens": 231_120, "host_tokens": 683_061, "token_usage": 0.97,
             "queued_requests": 80, "running_requests": 50, "cache_hit_rate": 0.125,
             "gpus": [{"index": 0, "used_bytes": 94_510_000_000}]},
        ],
        "report_schedules": [
            {"id": 1, "channel": "C0OPS", "host": None, "cadence": "daily 09:00",
             "next_run_at": T1, "created_by": "U0ANA", "created_at": T0, "enabled": True},
        ],
    },
}  # fmt: skip
SEED_ROWS["0002"] = {
    **SEED_ROWS["0001"],
    "revisions": [
        {**SEED_ROWS["0001"]["revisions"][0], "agent_revision_id": 2**53 + 1,
         "agent_returned_to": None},
        {**SEED_ROWS["0001"]["revisions"][1], "agent_revision_id": 4, "agent_returned_to": 2,
         "plan_per_rank_gb": None, "plan_total_gb": None, "plan_per_rank_tokens": None},
    ],
    "operations": [{**SEED_ROWS["0001"]["operations"][0], "agent_operation_id": 2**62}],
}  # fmt: skip
SEED_ROWS["0003"] = {
    **SEED_ROWS["0002"],
    "operations": [{**SEED_ROWS["0002"]["operations"][0], "caller": "slack-bot"}],
}

SEED_ROWS["0004"] = {
    **SEED_ROWS["0003"],
    "scheduler_locks": [
        {"name": "reports", "owner": "bot-1:4242:3f1c0a9e", "acquired_at": T0,
         "heartbeat_at": T1},
    ],
}  # fmt: skip

SEED_ROWS["0005_fleet_rollouts"] = {
    **SEED_ROWS["0004"],
    "rollouts": [
        {"id": 1, "fleet": "prod", "kind": "resize", "change": "hicache ratio 4",
         "ratio": 0.1 + 0.2, "size_gb": None, "proposed_by": "U0BEN", "applied_by": "U0ANA",
         "state": "stopped", "reason": AWKWARD, "channel": "C0OPS",
         "message_ts": "1771931919.000300", "created_at": T0, "expires_at": T1,
         "started_at": T0, "ended_at": T1},
    ],
    "rollout_replicas": [
        {"id": 1, "rollout_id": 1, "position": 0, "host": "kimi-01",
         "url": "http://10.0.0.11:30000", "phase": "done", "planned": AWKWARD, "proposal_id": 1,
         "agent_operation_id": 2**62, "agent_revision_id": 2**53 + 1,
         "old_config": "size 20 GB/rank", "new_config": "ratio 4", "detail": AWKWARD,
         "seconds": 31.25},
        {"id": 2, "rollout_id": 1, "position": 1, "host": "kimi-02",
         "url": "http://10.0.0.12:30000", "phase": "unchanged", "planned": None,
         "proposal_id": None, "agent_operation_id": None, "agent_revision_id": None,
         "old_config": None, "new_config": None, "detail": None, "seconds": None},
    ],
}  # fmt: skip

# 0006 adds an index and no table or column: the rows are 0005's.
SEED_ROWS["0006_revisions_by_time"] = SEED_ROWS["0005_fleet_rollouts"]

# 0007 gives every revision its kind and links a fleet proposal's revisions.
SEED_ROWS["0007_audit_kinds"] = {
    **SEED_ROWS["0006_revisions_by_time"],
    "revisions": [
        {**SEED_ROWS["0006_revisions_by_time"]["revisions"][0], "kind": "change"},
        {**SEED_ROWS["0006_revisions_by_time"]["revisions"][1], "kind": "rollback"},
    ],
    "proposal_replicas": [{"id": 1, "proposal_id": 1, "host": "kimi-01", "revision_id": 1}],
}

# Columns a migration converts on purpose: (table, column) -> how a value from before it reads.
CONVERTED: dict[str, dict[tuple[str, str], Callable[[Any], Any]]] = {
    "0002": {("operations", "agent_operation_id"): int},
}


def _converted(from_revision: str, table: str, column: str, value: Any) -> Any:
    for revision, columns in sorted(CONVERTED.items()):
        if revision > from_revision and (table, column) in columns:
            value = columns[table, column](value)
    return value


def _revisions() -> list[str]:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return [script.revision for script in ScriptDirectory.from_config(config).walk_revisions()]


def _stored(value: Any, engine: Engine) -> Any:
    # SQLite keeps naive UTC text (what the app's UTCDateTime writes); PostgreSQL timestamptz.
    if isinstance(value, datetime) and engine.dialect.name == "sqlite":
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _comparable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return value


def _fill(engine: Engine, seed: dict[str, list[dict[str, Any]]]) -> None:
    """Insert ``seed``'s rows into the tables as they stand now (every table must have rows)."""
    before = MetaData()
    before.reflect(engine)
    assert set(before.tables) - {"alembic_version"} == set(seed), "seed every table"
    with engine.begin() as conn:
        for table in before.sorted_tables:
            rows = seed.get(table.name, [])
            if rows:
                stored = [{k: _stored(v, engine) for k, v in row.items()} for row in rows]
                conn.execute(insert(table), stored)


def assert_upgrade_keeps_rows(url: str, from_revision: str, to_revision: str = "head") -> None:
    """Fill ``from_revision``'s tables with SEED_ROWS, upgrade, and check every value survived."""
    assert from_revision in SEED_ROWS, f"add SEED_ROWS[{from_revision!r}] for the new migration"
    seed = SEED_ROWS[from_revision]
    upgrade(url, from_revision)
    engine = make_engine(url)
    try:
        _fill(engine, seed)
        upgrade(engine, to_revision)
        after = MetaData()
        after.reflect(engine)
        with engine.connect() as conn:
            for name, rows in seed.items():
                table = after.tables[name]
                query = select(table).order_by(*table.primary_key.columns)
                got = [row._asdict() for row in conn.execute(query)]
                assert [{k: _comparable(row[k]) for k in rows[0]} for row in got] == [
                    {k: _comparable(_converted(from_revision, name, k, v)) for k, v in row.items()}
                    for row in rows
                ], name
    finally:
        engine.dispose()


@pytest.mark.parametrize("from_revision", _revisions())
def test_upgrade_from_every_revision_keeps_rows(db_url: str, from_revision: str) -> None:
    """Rows written at any earlier revision are all there, unchanged, after upgrading to head."""
    assert_upgrade_keeps_rows(db_url, from_revision)
    with Store(db_url) as store:
        failed, rollback = store.revision(1), store.revision(2)
    assert failed.plan.reason == AWKWARD
    assert failed.settings.ratio == 0.1 + 0.2
    assert failed.device_tokens == 2**62
    assert failed.proposed_at == T0
    assert (rollback.rollback_of, rollback.returned_to) == (1, 1)
    with Store(db_url) as store:
        operation = store.operation(1)
    expected_id = SEED_ROWS[from_revision]["operations"][0]["agent_operation_id"]
    assert operation.agent_operation_id == int(expected_id)


def test_downgrading_0002_turns_agent_ids_back_into_text(db_url: str) -> None:
    """Down from 0002 to 0001: the operation ids come back as text, unknown plan figures as 0,
    and the agent revision columns are gone; upgrading again works."""
    assert_upgrade_keeps_rows(db_url, "0002")
    assert downgrade(db_url, "0001") == "0001"
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            ids = conn.execute(text("SELECT agent_operation_id FROM operations")).scalars().all()
            columns = {c["name"] for c in inspect(conn).get_columns("revisions")}
            unknown_figures = conn.execute(
                text("SELECT plan_per_rank_gb, plan_total_gb, plan_per_rank_tokens FROM revisions")
            ).all()
    finally:
        engine.dispose()
    assert ids == [str(2**62)]
    # 0001 cannot say "unknown": the figures 0002 left NULL come back as 0.
    assert [tuple(row) for row in unknown_figures][1] == (0, 0, 0)
    assert not {"agent_revision_id", "agent_returned_to"} & columns
    assert upgrade_to_head(db_url) == head_revision()


def _revision_indexes(engine: Engine) -> dict[str, list[str | None]]:
    return {ix["name"]: ix["column_names"] for ix in inspect(engine).get_indexes("revisions")}


def test_0006_adds_the_time_index_and_downgrading_drops_only_it(db_url: str) -> None:
    """0005 to 0006 keeps every row and adds ``revisions (proposed_at, id)``; down to 0005 drops
    that index alone, and up again restores it."""
    assert_upgrade_keeps_rows(db_url, "0005_fleet_rollouts", "0006_revisions_by_time")
    engine = make_engine(db_url)
    try:
        at_0006 = _revision_indexes(engine)
        assert at_0006["ix_revisions_proposed_at_id"] == ["proposed_at", "id"]
        assert downgrade(engine, "0005_fleet_rollouts") == "0005_fleet_rollouts"
        at_0005 = _revision_indexes(engine)
        with engine.connect() as conn:
            revisions = conn.execute(text("SELECT count(*) FROM revisions")).scalar_one()
        assert upgrade(engine, "0006_revisions_by_time") == "0006_revisions_by_time"
        again = _revision_indexes(engine)
    finally:
        engine.dispose()
    assert at_0005 == {k: v for k, v in at_0006.items() if k != "ix_revisions_proposed_at_id"}
    assert revisions == len(SEED_ROWS["0005_fleet_rollouts"]["revisions"])
    assert again == at_0006


def test_0007_marks_rollbacks_allows_unchanged_and_downgrades_it_to_expired(db_url: str) -> None:
    """0006 to 0007: the revision with rollback_of becomes kind 'rollback', the other 'change';
    'unchanged' and the fleet link can then be written; down to 0006 'unchanged' reads
    'expired' (the nearest 0006 knows) and the link table is gone."""
    assert_upgrade_keeps_rows(db_url, "0006_revisions_by_time", "0007_audit_kinds")
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            kinds = conn.execute(text("SELECT kind FROM revisions ORDER BY id")).scalars().all()
            conn.execute(text("UPDATE revisions SET outcome = 'unchanged' WHERE id = 2"))
        assert downgrade(engine, "0006_revisions_by_time") == "0006_revisions_by_time"
        with engine.connect() as conn:
            outcome = conn.execute(text("SELECT outcome FROM revisions WHERE id = 2")).scalar()
        tables = set(inspect(engine).get_table_names())
        columns = {c["name"] for c in inspect(engine).get_columns("revisions")}
    finally:
        engine.dispose()
    assert kinds == ["change", "rollback"]
    assert outcome == "expired"
    assert "proposal_replicas" not in tables
    assert "kind" not in columns


def test_0007_refuses_a_kind_it_does_not_know(db_url: str) -> None:
    """The kind is checked by the database too, under the constraint's own name: 'resize' is
    not one of its three."""
    upgrade_to_head(db_url)
    engine = make_engine(db_url)
    try:
        with pytest.raises(DatabaseError, match="kind"), engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO revisions (host, hicache_enabled, command_line, plan, "
                    "plan_verdict, plan_reason, proposed_at, outcome, failure_lines, kind) "
                    "VALUES ('h', false, '[]', '{}', 'fits', '', :at, 'proposed', '[]', 'resize')"
                ),
                {"at": T0},
            )
        names = {c["name"] for c in inspect(engine).get_check_constraints("revisions")}
    finally:
        engine.dispose()
    assert {"ck_revisions_kind", "ck_revisions_outcome"} <= names


def test_an_operation_id_that_is_not_a_number_stops_0002_and_changes_nothing(
    db_url: str,
) -> None:
    """A text agent operation id stored at 0001 is named by the upgrade, which leaves the
    database at 0001 with the row as it was (never cast to 0)."""
    seed = dict(SEED_ROWS["0001"])
    seed["operations"] = [{**seed["operations"][0], "agent_operation_id": "op-7f3a"}]
    upgrade(db_url, "0001")
    engine = make_engine(db_url)
    try:
        _fill(engine, seed)
        with pytest.raises(MigrationError, match=r"operation 1: 'op-7f3a'.*correct or delete"):
            upgrade(engine, "head")
        assert current_revision(engine) == "0001"
        with engine.connect() as conn:
            ids = conn.execute(text("SELECT agent_operation_id FROM operations")).scalars().all()
    finally:
        engine.dispose()
    assert ids == ["op-7f3a"]


def test_upgrade_downgrade_upgrade_cycle(db_url: str) -> None:
    """Up to head, down to base (only Alembic's table left), up again: the store works."""
    assert current_revision(db_url) is None
    assert upgrade_to_head(db_url) == head_revision()
    assert downgrade(db_url, "base") is None
    engine = make_engine(db_url)
    try:
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    finally:
        engine.dispose()
    assert upgrade_to_head(db_url) == head_revision()
    with Store(db_url) as store:
        store.record_refusal("U1", "resize ratio abc", "ratio 'abc' is not a number")
        assert len(store.refusals()) == 1


def test_migrated_schema_matches_the_models_and_ignores_apscheduler(db_url: str) -> None:
    """Autogenerate finds nothing to change after `upgrade head`, with APScheduler's table there."""
    upgrade_to_head(db_url)
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE apscheduler_jobs (id VARCHAR(191) PRIMARY KEY)"))
        with engine.connect() as conn:
            filtered = MigrationContext.configure(
                conn, opts={"include_name": include_name, "compare_type": True}
            )
            assert compare_metadata(filtered, Base.metadata) == []
            unfiltered = MigrationContext.configure(conn, opts={"compare_type": True})
            diffs = compare_metadata(unfiltered, Base.metadata)
            assert [d[0] for d in diffs] == ["remove_table"]
            assert diffs[0][1].name == "apscheduler_jobs"
    finally:
        engine.dispose()


def test_sqlite_migration_stops_on_dangling_foreign_keys(tmp_path: Any) -> None:
    """PRAGMA foreign_key_check ends every SQLite migration: a dangling row aborts it loudly."""
    path = tmp_path / "kimi-ops.db"
    url = f"sqlite:///{path}"
    upgrade_to_head(url)
    raw = sqlite3.connect(path)  # foreign keys are off on a plain sqlite3 connection
    raw.execute(
        "INSERT INTO proposals (revision_id, channel, expires_at, fingerprint, requested, "
        "created_at) VALUES (999, 'C1', '2026-02-24 11:00:00', 'f', '{}', '2026-02-24 11:00:00')"
    )
    raw.commit()
    raw.close()
    with pytest.raises(MigrationError, match=r"1 dangling foreign key\(s\) \(proposals rowid 1"):
        upgrade(url)
    assert current_revision(url) == head_revision()


def test_app_connections_keep_foreign_keys_on_after_a_migration(tmp_path: Any) -> None:
    """Migrating on the app's engine turns foreign keys off only for the migration's run."""
    engine = make_engine(f"sqlite:///{tmp_path / 'kimi-ops.db'}")
    try:
        upgrade_to_head(engine)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
    finally:
        engine.dispose()


def test_unknown_revision_is_refused(db_url: str) -> None:
    """Asking for a revision that does not exist names it and changes nothing."""
    with pytest.raises(InputError, match="'0999'"):
        upgrade(db_url, "0999")
    assert current_revision(db_url) is None


def test_migrating_keeps_existing_loggers_enabled(tmp_path: Any) -> None:
    """env.py does not call fileConfig(), which would disable loggers created before it."""
    logger = logging.getLogger("kimi_ops_test.before_migration")
    upgrade_to_head(f"sqlite:///{tmp_path / 'kimi-ops.db'}")
    assert not logger.disabled
