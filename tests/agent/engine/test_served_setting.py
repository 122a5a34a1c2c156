"""Tests for the served-setting check: ``/server_info`` against the applied HiCache setting.

The mappings are what SGLang 0.5.23's ``/server_info`` reports (its resolved arguments).
"""

from __future__ import annotations

from bot.agent.cmdline import HiCacheSetting
from bot.agent.engine.served_setting import reported_mismatch

AUTO = HiCacheSetting(enabled=True)  # neither --hicache-ratio nor --hicache-size


def info(**fields: object) -> dict[str, object]:
    return {"enable_hierarchical_cache": True, "hicache_size": 0, **fields}


def test_an_auto_sized_start_serves_what_was_applied() -> None:
    """0.5.23 with neither flag reports ratio 2.0 (the default it lowers from) and fraction 0.8:
    that is the auto-sizing applied, not a mismatch."""
    served = info(hicache_ratio=2.0, hicache_host_memory_fraction=0.8)
    assert reported_mismatch(served, AUTO) is None


def test_an_older_server_without_flags_serves_ratio_2() -> None:
    """0.5.9 reports no fraction at all: ratio 2.0 with neither flag is what it serves."""
    assert reported_mismatch(info(hicache_ratio=2.0), AUTO) is None


def test_auto_sizing_off_where_it_was_applied_is_a_mismatch() -> None:
    """A null fraction says auto-sizing is off: not what writing neither flag asked for."""
    served = info(hicache_ratio=2.0, hicache_host_memory_fraction=None)
    why = reported_mismatch(served, AUTO)
    assert why is not None
    assert "auto-sizing off" in why


def test_an_explicit_ratio_is_still_compared_on_an_auto_sizing_version() -> None:
    """Ratio 1.5 applied, 0.5.23 serving 1.5 with its fraction null: served; serving 2.0 is not."""
    applied = HiCacheSetting(enabled=True, ratio=1.5)
    assert (
        reported_mismatch(info(hicache_ratio=1.5, hicache_host_memory_fraction=None), applied)
        is None
    )
    why = reported_mismatch(info(hicache_ratio=2.0, hicache_host_memory_fraction=0.8), applied)
    assert why == "the server reports hicache_ratio=2, but 1.5 was applied"


def test_a_size_served_where_auto_was_applied_is_a_mismatch() -> None:
    """A size of 48 served after auto was applied overrides it: said so."""
    why = reported_mismatch(info(hicache_size=48, hicache_ratio=2.0), AUTO)
    assert why == "the server reports hicache_size=48, which overrides the applied ratio"
