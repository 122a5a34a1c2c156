"""SGLang's HiCache auto-sizing: the ratio a server started without ``--hicache-ratio`` and
without ``--hicache-size`` picks for itself (docs/sglang.md, Auto-sizing)::

    per rank budget = (min(host available, cgroup headroom) - 10 GiB) // ranks per host
    budget          = int(per rank budget x --hicache-host-memory-fraction (0.8))
    ratio of a rank = min(default ratio (2.0), budget x (1 - 0.05) / device bytes of the rank)
    ratio           = the least over all ranks; <= 0 is SGLang's error at start

``device bytes`` are the bytes of the device KV pool whose host mirror scales with the ratio:
``(tokens + page_size) x bytes per token`` for an MHA or MLA pool (SGLang's buffers hold one
padding page). SGLang then logs the ratio it took::

    HiCache auto-sizing: ratio 2.000 -> 1.234; 36.6 GiB host memory per rank (fraction 0.80,
    2 ranks on this host), host pools 36.6 GiB.

Pure: numbers in, numbers out. The headroom comes from :func:`start_headroom_bytes`, the one
place that reads :class:`HostMemory` for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bot.errors import PlanInputError
from bot.planner._facts import HostMemory
from bot.planner._units import SGLANG_HOST_RESERVE_BYTES, GiB

__all__ = [
    "AUTO_SIZE_DEFAULT_RATIO",
    "AUTO_SIZE_FRACTION",
    "AUTO_SIZE_SLACK",
    "AutoSize",
    "auto_size",
    "per_rank_budget_bytes",
    "start_headroom_bytes",
]

#: ``--hicache-host-memory-fraction``'s default: the share of the per-rank budget the pools take.
AUTO_SIZE_FRACTION = 0.8
#: ``_ALLOCATION_SLACK_FRACTION``: page rounding, allocator metadata and staging buffers.
AUTO_SIZE_SLACK = 0.05
#: The ratio auto-sizing lowers (``--hicache-ratio``'s default in cache mode).
AUTO_SIZE_DEFAULT_RATIO = 2.0


@dataclass(frozen=True)
class AutoSize:
    """The ratio SGLang will pick, and the figures it comes from (those it logs).

    ``budget_bytes`` is one rank's budget after the fraction; ``device_bytes`` the device bytes
    of the rank whose ratio is the least (the one that sets the ratio of all).
    """

    requested: float
    ratio: float
    headroom_bytes: int
    budget_bytes: int
    fraction: float
    ranks_per_host: int
    device_bytes: int

    @property
    def lowered(self) -> bool:
        return self.ratio < self.requested

    def describe(self) -> str:
        """The arithmetic in one sentence, for the plan's notes."""
        return (
            f"SGLang auto-sizes HiCache at start: (headroom {self.headroom_bytes / GiB:.1f} GiB "
            f"- 10 GiB reserve) // {self.ranks_per_host} rank"
            f"{'s' if self.ranks_per_host != 1 else ''} x fraction {self.fraction:.2f} = "
            f"{self.budget_bytes / GiB:.1f} GiB per rank; less {AUTO_SIZE_SLACK:.0%} slack over "
            f"{self.device_bytes / GiB:.2f} GiB of device pool gives ratio "
            f"{self.requested:.3f} -> {self.ratio:.3f}"
        )


def start_headroom_bytes(memory: HostMemory) -> float:
    """The memory SGLang will see free when it starts: the server's memory domain after the
    stop (:attr:`HostMemory.free_after_stop_bytes`: the least of the host's and the cgroup's,
    each with what the stopped server releases), the figure the budget is checked against."""
    return memory.free_after_stop_bytes


def per_rank_budget_bytes(headroom_bytes: float, ranks_per_host: int) -> int:
    """``host_memory_budget_bytes``: (headroom - 10 GiB) // ranks per host, in whole bytes
    (negative when the reserve takes it all)."""
    if ranks_per_host < 1:
        raise PlanInputError(f"ranks per host must be at least 1, not {ranks_per_host}")
    return (int(headroom_bytes) - SGLANG_HOST_RESERVE_BYTES) // ranks_per_host


def auto_size(
    headroom_bytes: float,
    device_bytes_per_rank: Sequence[int],
    ranks_per_host: int,
    requested: float = AUTO_SIZE_DEFAULT_RATIO,
    fraction: float = AUTO_SIZE_FRACTION,
) -> AutoSize | str:
    """The ratio SGLang's ``auto_size_hicache`` picks, or why it refuses to start (no memory
    left after the reserve).

    ``device_bytes_per_rank`` holds each rank's device bytes; the ratio is the least over them,
    as SGLang's all-reduce MIN makes it. Every rank here shares one host, so one budget.
    """
    if not device_bytes_per_rank or any(b <= 0 for b in device_bytes_per_rank):
        raise PlanInputError(
            "auto-sizing needs each rank's device pool bytes > 0, not "
            f"{list(device_bytes_per_rank)}"
        )
    if not (math.isfinite(fraction) and 0 < fraction <= 1):
        raise PlanInputError(f"--hicache-host-memory-fraction {fraction!r} must be in (0, 1]")
    if not (math.isfinite(requested) and requested > 0):
        raise PlanInputError(f"the default ratio {requested!r} must be a number > 0")
    per_rank = per_rank_budget_bytes(headroom_bytes, ranks_per_host)
    budget = int(per_rank * fraction)
    ratios = [
        (min(requested, budget * (1 - AUTO_SIZE_SLACK) / device), device)
        for device in device_bytes_per_rank
    ]
    ratio, device = min(ratios)
    if ratio <= 0:
        return (
            f"SGLang's auto-sizing finds no host memory for HiCache after its 10 GiB reserve "
            f"({headroom_bytes / GiB:.1f} GiB headroom, {ranks_per_host} rank"
            f"{'s' if ranks_per_host != 1 else ''}) and refuses to start; free memory or set "
            "a ratio or size explicitly"
        )
    return AutoSize(
        requested=requested,
        ratio=ratio,
        headroom_bytes=int(headroom_bytes),
        budget_bytes=budget,
        fraction=fraction,
        ranks_per_host=ranks_per_host,
        device_bytes=device,
    )
