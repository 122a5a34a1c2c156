"""The history as people and auditors read it: a table, JSON, or CSV with every column.

Pure functions of :class:`RevisionRecord` values. CSV and JSON keep every field of the audit,
lossless: floats as Python writes them back (``repr``), instants in ISO 8601 UTC, lists and the
plan as JSON text in CSV cells (quoted by the csv module, RFC 4180).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from bot.store.records import RevisionKind, RevisionRecord

__all__ = ["COLUMNS", "history_csv", "history_json", "history_table", "revision_dict"]

COLUMNS: tuple[tuple[str, Callable[[RevisionRecord], Any]], ...] = (
    ("id", lambda r: r.id),
    ("host", lambda r: r.host),
    ("outcome", lambda r: r.outcome.value),
    ("proposed_by", lambda r: r.proposed_by),
    ("proposed_at", lambda r: r.proposed_at),
    ("applied_by", lambda r: r.applied_by),
    ("applied_at", lambda r: r.applied_at),
    ("finished_at", lambda r: r.finished_at),
    ("hicache_enabled", lambda r: r.settings.enabled),
    ("hicache_ratio", lambda r: r.settings.ratio),
    ("hicache_size_gb", lambda r: r.settings.size_gb),
    ("hicache_write_policy", lambda r: r.settings.write_policy),
    ("hicache_io_backend", lambda r: r.settings.io_backend),
    ("command_line", lambda r: list(r.command_line)),
    ("plan_per_rank_gb", lambda r: r.plan.per_rank_gb),
    ("plan_total_gb", lambda r: r.plan.total_gb),
    ("plan_per_rank_tokens", lambda r: r.plan.per_rank_tokens),
    ("plan_verdict", lambda r: r.plan.verdict),
    ("plan_reason", lambda r: r.plan.reason),
    ("plan", lambda r: dict(r.plan.detail)),
    ("startup_seconds", lambda r: r.startup_seconds),
    ("device_tokens", lambda r: r.device_tokens),
    ("host_gb_per_rank", lambda r: r.host_gb_per_rank),
    ("host_tokens_per_rank", lambda r: r.host_tokens_per_rank),
    ("failure_kind", lambda r: None if r.failure_kind is None else r.failure_kind.value),
    ("failure_lines", lambda r: list(r.failure_lines)),
    ("rollback_of", lambda r: r.rollback_of),
    ("returned_to", lambda r: r.returned_to),
    ("agent_revision_id", lambda r: r.agent_revision_id),
    ("agent_returned_to", lambda r: r.agent_returned_to),
    ("kind", lambda r: r.kind.value),
)


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def revision_dict(record: RevisionRecord) -> dict[str, Any]:
    """Every field of the revision, JSON-able, in :data:`COLUMNS` order."""
    return {name: _json_value(get(record)) for name, get in COLUMNS}


def history_json(records: Sequence[RevisionRecord]) -> str:
    return json.dumps([revision_dict(r) for r in records], indent=2, allow_nan=False)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | dict):
        return json.dumps(value, allow_nan=False)
    return str(value)


def history_csv(records: Sequence[RevisionRecord]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([name for name, _ in COLUMNS])
    for record in records:
        writer.writerow([_cell(get(record)) for _, get in COLUMNS])
    return out.getvalue()


def _change(record: RevisionRecord) -> str:
    s = record.settings
    if not s.enabled:
        return "hicache off"
    if s.size_gb:
        return f"size {s.size_gb} GB/rank"
    if s.ratio is not None:
        return f"ratio {s.ratio:g}"
    return "hicache on"


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%SZ")


def _num(value: float | int | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


_TABLE: tuple[tuple[str, Callable[[RevisionRecord], str]], ...] = (
    ("id", lambda r: str(r.id)),
    ("host", lambda r: r.host),
    ("outcome", lambda r: r.outcome.value),
    ("change", _change),
    ("GB/rank", lambda r: _num(r.plan.per_rank_gb, ".2f")),
    ("total GB", lambda r: _num(r.plan.total_gb, ".1f")),
    ("proposed by", lambda r: r.proposed_by or "(auto)"),
    ("applied by", lambda r: r.applied_by or "-"),
    ("proposed at", lambda r: _when(r.proposed_at)),
    ("finished at", lambda r: _when(r.finished_at)),
    ("startup s", lambda r: _num(r.startup_seconds, ".0f")),
    ("device tok", lambda r: _num(r.device_tokens, ",")),
    ("host tok/rank", lambda r: _num(r.host_tokens_per_rank, ",")),
    ("note", lambda r: _note(r)),
)


def _note(record: RevisionRecord) -> str:
    parts = [] if record.kind is RevisionKind.CHANGE else [record.kind.value]
    if record.failure_kind:
        parts.append(f"failed: {record.failure_kind}")
    if record.rollback_of is not None:
        parts.append(f"rollback of #{record.rollback_of}")
    if record.returned_to is not None:
        parts.append(f"back to #{record.returned_to}")
    return ", ".join(parts)


def history_table(records: Sequence[RevisionRecord]) -> str:
    """An aligned plain-text table, newest first as given; a sentence when there is nothing."""
    if not records:
        return "no configuration recorded yet"
    rows = [[name for name, _ in _TABLE]]
    rows += [[get(record) for _, get in _TABLE] for record in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_TABLE))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)
