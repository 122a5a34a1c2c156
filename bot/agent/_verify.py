"""Small pure helpers of the runner: does the running server report what was applied, how many
local ranks and which GPUs a command line uses, and the one-line summaries people read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bot.agent.cmdline import DEFAULT_HICACHE_RATIO, HiCacheSetting

__all__ = ["gpu_indices", "reported_mismatch"]


def reported_mismatch(info: Mapping[str, Any], applied: HiCacheSetting) -> str | None:
    """Why ``/server_info`` does not show ``applied`` (None when it does).

    With a size set, SGLang reports ``hicache_ratio`` at its default beside it (the field notes
    saw ratio 2.0 next to size 48): only the size is compared then.
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
    raw = info.get("hicache_ratio")
    ratio = DEFAULT_HICACHE_RATIO if raw is None else float(raw)
    assert want.ratio is not None
    if not math.isclose(ratio, want.ratio, rel_tol=1e-6):
        return f"the server reports hicache_ratio={ratio:g}, but {want.ratio:g} was applied"
    return None


def gpu_indices(ranks: int, env: Mapping[str, str]) -> list[int]:
    """The GPUs the server uses: ``CUDA_VISIBLE_DEVICES`` from its environment, else 0..ranks-1."""
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        parts = [p.strip() for p in visible.split(",")]
        if all(p.isdigit() for p in parts):
            return [int(p) for p in parts][:ranks]
    return list(range(ranks))
