"""SGLang's host pool rule as the simulator applies it (docs/sglang.md, Host pool sizing)."""

from __future__ import annotations

from bot.sim._sizing import host_pool

PER_TOKEN = 576 * 2 * 61  # Kimi-K2.5 MLA, bf16


def test_ratio_four_allocates_44_77_gb() -> None:
    """Ratio 4 on 159,274 device tokens: (637,096 + 1 page) x 70,272 B = 44.77 GB (1e9)."""
    pool = host_pool(159274, PER_TOKEN, 4.0, 0, 1)
    assert pool.tokens == 159274 * 4 + 1
    assert f"{pool.bytes / 1e9:.2f}" == "44.77"


def test_size_wins_over_ratio() -> None:
    """Size 48 ignores the ratio: int(48e9 // 70,272) + 1 = 683,061 tokens, 48.00 GB."""
    pool = host_pool(159274, PER_TOKEN, 4.0, 48, 1)
    assert pool.tokens == 683061
    assert f"{pool.bytes / 1e9:.2f}" == "48.00"


def test_page_alignment_adds_one_page() -> None:
    """With page size 64 the pool is whole pages plus one extra page."""
    pool = host_pool(1000, 100, 2.0, 0, 64)
    assert pool.tokens == (2000 // 64 + 1) * 64
