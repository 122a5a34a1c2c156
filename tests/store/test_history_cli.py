"""`kimi-ops history`: a table for people, JSON, and CSV that auditors can parse back."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.cli import main
from bot.hicache import HiCacheSetting
from bot.store import PlanSummary, Store, upgrade_to_head
from tests.store.conftest import TickingClock

REASON = 'fits: 8 x 48.00 GB = 384.00 GB, "headroom" 40 GB\nsecond line, ✓'
FAILURE = ["Not enough host memory available. Requesting 300.00 GB, only 437.12 GB free."]
HEADER = [
    "id", "host", "outcome", "proposed_by", "proposed_at", "applied_by", "applied_at",
    "finished_at", "hicache_enabled", "hicache_ratio", "hicache_size_gb", "hicache_write_policy",
    "hicache_io_backend", "command_line", "plan_per_rank_gb", "plan_total_gb",
    "plan_per_rank_tokens", "plan_verdict", "plan_reason", "plan", "startup_seconds",
    "device_tokens", "host_gb_per_rank", "host_tokens_per_rank", "failure_kind",
    "failure_lines", "rollback_of", "returned_to", "agent_revision_id", "agent_returned_to",
    "kind",
]  # fmt: skip


@pytest.fixture
def audited(db_url: str) -> str:
    """A database with a failed resize on kimi-01 and a ready one on kimi-02."""
    upgrade_to_head(db_url)
    clock = TickingClock(datetime(2026, 2, 24, 11, 0, tzinfo=UTC))
    with Store(db_url, clock=clock) as store:
        settings = HiCacheSetting(True, 2.0, 48, "write_through", "kernel")
        argv = ("python", "-m", "x,y")
        plan = PlanSummary(48.000062592, 384.000500736, 683_061, "fits", REASON, {"ranks": 8})
        failed = store.record_revision(
            "kimi-01", settings, plan, proposed_by="U0BEN", command_line=argv
        ).id
        store.record_apply(failed, "U0ANA")  # 11:00:02
        store.record_outcome(failed, "failed", failure_kind="host_memory", failure_lines=FAILURE)
        ready = store.record_revision("kimi-02", settings, plan, proposed_by="U0ANA").id
        store.record_apply(ready, "U0BEN")
        store.record_outcome(ready, "ready", startup_seconds=662.25, device_tokens=231_120)
    return db_url


def test_csv_parses_back_to_the_recorded_values(
    audited: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """csv.reader gets the header and, per revision, every column as recorded, newest first."""
    assert main(["history", "--url", audited, "--csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out, newline="")))
    assert rows[0] == HEADER
    assert [row[0] for row in rows[1:]] == ["2", "1"]
    failed = dict(zip(HEADER, rows[2], strict=True))
    assert failed["host"] == "kimi-01"
    assert failed["outcome"] == "failed"
    assert (failed["proposed_by"], failed["applied_by"]) == ("U0BEN", "U0ANA")
    assert failed["proposed_at"] == "2026-02-24T11:00:01+00:00"
    assert failed["applied_at"] == "2026-02-24T11:00:02+00:00"
    assert failed["finished_at"] == "2026-02-24T11:00:03+00:00"
    assert failed["plan_reason"] == REASON
    assert json.loads(failed["command_line"]) == ["python", "-m", "x,y"]
    assert json.loads(failed["failure_lines"]) == FAILURE
    assert json.loads(failed["plan"]) == {"ranks": 8}
    assert float(failed["plan_total_gb"]) == 384.000500736
    assert (failed["hicache_enabled"], failed["hicache_size_gb"]) == ("true", "48")
    assert failed["startup_seconds"] == ""
    ready = dict(zip(HEADER, rows[1], strict=True))
    assert (ready["startup_seconds"], ready["device_tokens"]) == ("662.25", "231120")


def test_json_lists_every_field(audited: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints a list of objects with every column, filtered by host."""
    assert main(["history", "--url", audited, "--json", "--host", "kimi-01"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 1
    assert list(records[0]) == HEADER
    assert records[0]["failure_kind"] == "host_memory"
    assert records[0]["plan_per_rank_tokens"] == 683_061


def test_table_for_people(audited: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The default table shows who proposed and applied, the change and the outcome."""
    assert main(["history", "--url", audited, "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[:3] == ["id", "host", "outcome"]
    for shown in ("kimi-02", "ready", "size 48 GB/rank", "U0ANA", "U0BEN", "231,120"):
        assert shown in lines[1]


def test_missing_sqlite_file_is_reported_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading history never creates an empty database where none was."""
    path = tmp_path / "absent.db"
    assert main(["history", "--url", f"sqlite:///{path}"]) == 1
    assert "kimi-ops db upgrade" in capsys.readouterr().err
    assert not path.exists()


def test_limit_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--limit 0 is a usage error naming the option and the value, and creates no database."""
    with pytest.raises(SystemExit) as exited:
        main(["history", "--url", f"sqlite:///{tmp_path / 'x.db'}", "--limit", "0"])
    assert exited.value.code == 2
    assert "argument --limit: '0' must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()
