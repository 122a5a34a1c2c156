"""Does the running server serve what was applied? ``/server_info`` against the HiCache setting
written on its command line (pure: a mapping and a setting in, the reason for a mismatch out)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bot.agent.cmdline import DEFAULT_HICACHE_RATIO, HiCacheSetting

__all__ = ["reported_mismatch"]


def reported_mismatch(info: Mapping[str, Any], applied: HiCacheSetting) -> str | None:
    """Why ``/server_info`` does not show ``applied`` (None when it does).

    With a size set, SGLang reports ``hicache_ratio`` at its default beside it (the field notes
    saw ratio 2.0 next to size 48): only the size is compared then.

    With neither flag written, 0.5.23 auto-sizes: ``/server_info`` holds the resolved arguments,
    so it reports the default ratio 2.0 it lowers from (the ratio it took is only logged) and
    ``hicache_host_memory_fraction`` 0.8; a null fraction there means auto-sizing is off.
    Earlier versions report no fraction and take ratio 2.0.
    """
    want = applied.effective()
    enabled = bool(info.get("enable_hierarchical_cache") or info.get("enable_hicache"))
    if enabled != want.enabled:
        return (
            f"the server reports enable_hierarchical_cache={enabled}, but "
            f"{'on' if want.enabled else 'off'} was applied"
        )
    if not want.enabled:
        return None
    size = info.get("hicache_size") or 0
    if want.size_gb is not None:
        if size != want.size_gb:
            return f"the server reports hicache_size={size}, but {want.size_gb} was applied"
        return None
    if size:
        return f"the server reports hicache_size={size}, which overrides the applied ratio"
    fraction_key = "hicache_host_memory_fraction"
    if applied.ratio is None and fraction_key in info and info[fraction_key] is None:
        return (
            "the server reports hicache_host_memory_fraction=None (auto-sizing off), but "
            "neither --hicache-ratio nor --hicache-size was applied"
        )
    raw = info.get("hicache_ratio")
    ratio = DEFAULT_HICACHE_RATIO if raw is None else float(raw)
    assert want.ratio is not None
    if not math.isclose(ratio, want.ratio, rel_tol=1e-6):
        return f"the server reports hicache_ratio={ratio:g}, but {want.ratio:g} was applied"
    return None
