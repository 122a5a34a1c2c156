"""The agent's state file across versions: a schema-1 file (the first agents', written here with
their exact DDL) is upgraded in place when a newer agent opens it, and an operation in flight
keeps its position; a file from a newer agent is refused untouched."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.agent.service import make_control
from bot.agent.sglang_client import SGLangClient
from bot.agent.state._schema import SCHEMA_VERSION
from bot.agent.state.agent_state import DB_FILE, AgentState
from bot.agent.state.resume_point import ResumePoint, RollbackCause, Stage, Step
from bot.errors import MigrationError, StoreError
from bot.vocab import OperationState
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final
from tests.agent.conftest import wait_until

__all__ = ["harness_factory"]

# The tables as the first agents created them (SQLAlchemy's DDL, user_version left at 0).
SCHEMA_1 = """
CREATE TABLE operations (
    id INTEGER NOT NULL, kind VARCHAR(16) NOT NULL, state VARCHAR(16) NOT NULL,
    actor VARCHAR(200) NOT NULL, created_at VARCHAR(40) NOT NULL, finished_at VARCHAR(40),
    request JSON NOT NULL, "plan" JSON, revision INTEGER, rollback_of INTEGER, outcome TEXT,
    failure JSON, cursor JSON, PRIMARY KEY (id)
);
CREATE TABLE revisions (
    id INTEGER NOT NULL, argv JSON NOT NULL, hicache JSON NOT NULL, outcome VARCHAR(16) NOT NULL,
    became_ready BOOLEAN NOT NULL, startup_s FLOAT, device_tokens INTEGER,
    kv_bytes_per_token FLOAT, host_gb_per_rank FLOAT, host_tokens_per_rank INTEGER,
    created_at VARCHAR(40) NOT NULL, finished_at VARCHAR(40), actor VARCHAR(200) NOT NULL,
    kind VARCHAR(16) NOT NULL, rollback_of INTEGER, operation_id INTEGER, PRIMARY KEY (id)
);
CREATE TABLE events (
    op_id INTEGER NOT NULL, seq INTEGER NOT NULL, at VARCHAR(40) NOT NULL,
    phase VARCHAR(32) NOT NULL, message TEXT NOT NULL, progress FLOAT NOT NULL,
    data JSON NOT NULL, PRIMARY KEY (op_id, seq), FOREIGN KEY(op_id) REFERENCES operations (id)
);
"""
NOW = "2026-03-02T09:14:05.120+00:00"
ARGV = ["python3", "-m", "sglang.launch_server", "--tp-size", "8", "--hicache-ratio", "4"]


def _write_schema_1(state_dir: Path, operations: list[tuple[int, str, dict[str, object]]]) -> Path:
    """A schema-1 state file with one revision and ``operations`` as (id, state, cursor)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / DB_FILE
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_1)
        conn.execute(
            "INSERT INTO revisions (id, argv, hicache, outcome, became_ready, created_at, actor,"
            " kind) VALUES (1, ?, '{}', 'pending', 0, ?, 'ana', 'resize')",
            (json.dumps(ARGV), NOW),
        )
        for op_id, state, cursor in operations:
            conn.execute(
                "INSERT INTO operations (id, kind, state, actor, created_at, request, revision,"
                " cursor) VALUES (?, 'resize', ?, 'ana', ?, '{}', 1, ?)",
                (op_id, state, NOW, json.dumps(cursor)),
            )
            conn.execute(
                "INSERT INTO events VALUES (?, 1, ?, 'planned', 'resize', 0.0, ?)",
                (op_id, NOW, json.dumps({"step": "apply:planned"})),
            )
    conn.close()
    return path


def _user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    conn.close()
    return version


def test_a_schema_1_file_is_upgraded_with_its_cursors_as_resume_points(tmp_path: Path) -> None:
    """Opening a schema-1 file brings it to the current version; each unfinished operation's
    cursor dict becomes the ResumePoint it described (apply and rollback stages), events and
    states are kept, and opening it again changes nothing more."""
    apply_cursor = {"stage": "apply", "step": "following", "rev_id": 1, "argv": ARGV,
                    "expected_gb": 31.6, "pid": 4242, "t0": 1767000000.5}  # fmt: skip
    rollback_cursor = {"stage": "rollback", "step": "stopping", "rev_id": 1, "argv": ARGV,
                       "target": 1, "cause": {"kind": "crash"},
                       "cause_message": "the server died in load_weights"}  # fmt: skip
    starting_cursor = {"stage": "apply", "step": "starting", "rev_id": 1, "argv": ARGV}
    path = _write_schema_1(
        tmp_path,
        [(1, "running", apply_cursor), (2, "rolling_back", rollback_cursor),
         (3, "stalled", starting_cursor)],
    )  # fmt: skip
    assert _user_version(path) == 0
    state = AgentState(tmp_path)
    assert state.schema_found == 1
    assert _user_version(path) == SCHEMA_VERSION
    assert state.resume_point(1) == ResumePoint(
        Stage.APPLY, Step.FOLLOWING, 1, tuple(ARGV), expected_gb=31.6, starts=1, pid=4242,
        t0=1767000000.5,
    )  # fmt: skip
    assert state.resume_point(2) == ResumePoint(
        Stage.ROLLBACK, Step.STOPPING, 1, tuple(ARGV),
        rollback=RollbackCause(1, {"kind": "crash"}, "the server died in load_weights"),
    )  # fmt: skip
    # A schema-1 agent past "starting" had begun one start: it is the first.
    assert state.resume_point(3) == ResumePoint(Stage.APPLY, Step.STARTING, 1, tuple(ARGV),
                                                starts=1)  # fmt: skip
    assert [op.id for op in state.unfinished_operations()] == [1, 2, 3]
    view = state.operation(2)
    assert view is not None
    assert view.state is OperationState.ROLLING_BACK
    assert [e.data["step"] for e in state.events(1)] == ["apply:planned"]
    state.close()
    again = AgentState(tmp_path)
    assert again.schema_found == SCHEMA_VERSION
    assert again.resume_point(1) == ResumePoint(
        Stage.APPLY, Step.FOLLOWING, 1, tuple(ARGV), expected_gb=31.6, starts=1, pid=4242,
        t0=1767000000.5,
    )  # fmt: skip
    again.close()


def test_a_new_file_is_created_at_the_current_version(tmp_path: Path) -> None:
    """A state directory without a file gets the current schema, with its version set."""
    AgentState(tmp_path).close()
    assert _user_version(tmp_path / DB_FILE) == SCHEMA_VERSION


def test_a_file_from_a_newer_agent_is_refused_untouched(tmp_path: Path) -> None:
    """A state file at a schema this agent does not know is refused, naming both versions,
    and its schema and tables are left as they were."""
    path = _write_schema_1(tmp_path, [])
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 7}")
    conn.close()
    with pytest.raises(MigrationError, match=rf"schema {SCHEMA_VERSION + 7}.*{SCHEMA_VERSION}"):
        AgentState(tmp_path)
    assert _user_version(path) == SCHEMA_VERSION + 7
    with sqlite3.connect(path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(operations)")]
    conn.close()
    assert "cursor" in columns
    assert "resume_point" not in columns


def test_a_resume_point_of_another_version_is_refused(tmp_path: Path) -> None:
    """A stored resume point that is not a version-1 record is an error naming it, not a guess."""
    with pytest.raises(StoreError, match="not a version-1 record"):
        ResumePoint.from_json({"version": 2, "stage": "apply"})
    with pytest.raises(StoreError, match="malformed"):
        ResumePoint.from_json({"version": 1, "stage": "apply"})


@pytest.mark.slow
def test_an_operation_in_flight_under_schema_1_resumes_to_ready(
    harness_factory: Callable[..., Harness],
) -> None:
    """An agent upgraded while it followed a start: the schema-1 file records the operation at
    "following" the running server's pid; the new agent migrates the file, resumes the
    operation and ends it ready, without starting the server again."""
    command = sim_command(free_port(), "--mem-fraction-static", "0.7",
                          "--enable-hierarchical-cache", "--hicache-ratio", "2")  # fmt: skip
    harness = harness_factory(command)
    control = make_control(harness.settings)  # the server, started before any state file
    harness.controls.append(control)
    control.start("1:1")
    client = SGLangClient(harness.settings.server_url, timeout=2.0)
    harness.clients.append(client)
    wait_until(lambda: client.health() == 200, timeout_s=60)
    pid, started_at = control.status().main_pid, control.status().started_at
    cursor = {"stage": "apply", "step": "following", "rev_id": 1, "argv": command,
              "pid": pid, "t0": started_at}  # fmt: skip
    path = _write_schema_1(harness.settings.state_dir, [(1, "running", cursor)])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE revisions SET argv = ?", (json.dumps(command),))
    conn.close()
    manager = harness.manager()
    assert manager.resume() == [1]
    final = wait_final(manager, 1)
    events = manager.state.events(1)
    assert final.state is OperationState.READY, events[-1].message
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert harness.log_text().count("server_args=") == 1  # never started again
