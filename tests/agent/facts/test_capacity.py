"""The capacity reader on a hybrid sliding-window model's log: both device pools reach the
planner, each at the top of its logged size's rounding, so its plan never counts less RAM
than SGLang allocates."""

from __future__ import annotations

import math

from bot.agent.cmdline import Topology
from bot.agent.facts._capacity import CapacityReader
from bot.errors import KimiOpsError
from bot.planner import (
    GB,
    ChangeRequest,
    DevicePool,
    HostMemory,
    ServerFacts,
    SGLangVersion,
    make_plan,
)
from tests.startup.conftest import read_log

GiB = 1024**3


class _Log:
    """The last run's output: the hybrid fixture log, finished."""

    def last_run_key(self) -> str | None:
        return "run-1"

    def last_run_log(self, max_bytes: int) -> str:
        return read_log("hybrid_swa_pools_v0.5.23.log")[:max_bytes]


class _NoRecord:
    def last_start_capacity(self) -> tuple[int, float | None, int | None, float | None] | None:
        return None


def test_a_hybrid_log_gives_both_device_pools_to_the_planner() -> None:
    """Full 32,997 tokens at 0.56 GiB and sliding-window 26,397 at 0.46 GiB (K + V as logged):
    each pool's bytes per token is the top of its rounding over its rows; ratio 2 then plans at
    least SGLang's 65,995 and 52,795 host tokens at the true 18,432 B."""
    errors: list[KimiOpsError] = []
    capacity = CapacityReader(_Log(), _NoRecord()).read(None, None, Topology(tp=2), errors)
    assert errors == []
    hybrid = capacity.hybrid_pools
    assert hybrid is not None
    assert (hybrid.full_tokens, hybrid.swa_tokens) == (32997, 26397)
    assert hybrid.full_bytes_per_token == math.ceil(0.565 * GiB / 32998)
    assert hybrid.swa_bytes_per_token == math.ceil(0.465 * GiB / 26398)
    server = ServerFacts(
        ranks=2,
        device_pool=DevicePool(tokens=32997, bytes_per_token=hybrid.full_bytes_per_token),
        version=SGLangVersion.parse("0.5.23"),
        hybrid_pools=hybrid,
    )
    plan = make_plan(ChangeRequest(ratio=2), server, HostMemory(available_bytes=1000 * GB))
    assert [pool.name for pool in plan.host_pools] == ["KV", "swa"]
    assert plan.per_rank_total_bytes is not None
    assert plan.per_rank_total_bytes >= (65995 + 52795) * 18432
