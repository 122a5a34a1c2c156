"""Tests for 0.5.23's auto-sizing line: its event and the report's ratio.

The lines are SGLang's format string (``mem_cache/hicache_auto_size.py``) filled in as SGLang
fills it; the line its own function logged on CPU is read in ``tests/real_sglang``.
"""

from __future__ import annotations

import pytest

from bot.startup import Dialect, HiCacheAutoSized, StartupParser, build_report
from tests.startup.conftest import parse_all

LINE = (
    "[2026-12-01 21:00:00 TP{rank}] HiCache auto-sizing: ratio 2.000 -> {ratio}; 36.6 GiB host "
    "memory per rank (fraction 0.80, 2 ranks on this host), host pools 5.3 GiB.\n"
)


def test_the_auto_sizing_line_gives_the_ratio_and_the_budget() -> None:
    """Every figure of the line is read, with the rank and the 0.5.23 dialect."""
    events = parse_all(LINE.format(rank=0, ratio="1.083"))
    (auto,) = [e for e in events if isinstance(e, HiCacheAutoSized)]
    assert (auto.rank, auto.requested, auto.ratio, auto.budget_gib) == ("TP0", 2.0, 1.083, 36.6)
    assert (auto.fraction, auto.ranks, auto.host_pools_gib) == (0.8, 2, 5.3)
    assert auto.line.startswith("[2026-12-01 21:00:00 TP0] HiCache auto-sizing")
    assert any(getattr(e, "dialect", None) is Dialect.V0_5_23 for e in events)


def test_the_report_holds_the_least_ratio_any_rank_logged() -> None:
    """Two ranks' lines: the report's ratio is the least (they agree after SGLang's MIN)."""
    report = build_report(
        parse_all(LINE.format(rank=0, ratio="1.083") + LINE.format(rank=1, ratio="1.070"))
    )
    assert report.hicache_auto_ratio == pytest.approx(1.07)
    assert report.to_dict()["hicache_auto_ratio"] == pytest.approx(1.07)


def test_a_start_without_auto_sizing_has_no_ratio_in_its_report() -> None:
    """A line that only looks like it (a changed format) is not read, and the report says None."""
    text = "[2026-12-01 21:00:00] HiCache auto-sizing: disabled\n"
    assert not [e for e in parse_all(text) if isinstance(e, HiCacheAutoSized)]
    assert build_report(parse_all(text)).hicache_auto_ratio is None


def test_the_line_cut_anywhere_gives_the_same_event() -> None:
    """Fed in two pieces at every cut, the line gives the one event a single chunk gives."""
    text = LINE.format(rank=3, ratio="0.512")
    whole = [e for e in parse_all(text) if isinstance(e, HiCacheAutoSized)]
    for cut in range(1, len(text)):
        parser = StartupParser()
        events = parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.close()
        assert [e for e in events if isinstance(e, HiCacheAutoSized)] == whole
