"""The core's words shared by every surface: uptime and what a rollback returns to."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.chat.audit import RollbackTarget
from bot.chat.wording import rollback_head, uptime_text
from bot.hicache import HiCacheSetting


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "?"),
        (42.9, "42 s"),
        (203, "3 min 23 s"),
        (7_500, "2 h 05 min"),
        (3 * 86_400 + 4 * 3600 + 59, "3 d 04 h"),
    ],
)
def test_uptime_reads_in_units_never_as_a_clock(seconds: float | None, shown: str) -> None:
    """3 min 23 s is never '3:23' (read as hours) nor '0:03:23'. Failed before the fix: the
    status said 'up 3:23' and the report 'up 0:03:23'."""
    assert uptime_text(seconds) == shown


def test_a_rollback_head_names_the_history_s_revision_its_config_and_who_applied_it() -> None:
    """Roll back kimi-01 to revision 7: its setting, who applied it and when (UTC)."""
    target = RollbackTarget(
        revision=7,
        host="kimi-01",
        agent_revision=3,
        setting=HiCacheSetting(enabled=True, ratio=4.0),
        applied_by="ana",
        applied_at=datetime(2026, 12, 1, 14, 2, tzinfo=UTC),
    )
    assert rollback_head(target) == (
        "Roll back kimi-01 to revision 7: ratio 4 x device pool "
        "(applied by ana on 2026-12-01 14:02 UTC)"
    )
