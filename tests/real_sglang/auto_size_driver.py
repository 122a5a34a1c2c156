"""Runs SGLang 0.5.23's own HiCache auto-sizing in the side virtualenv, allocation-free.

Read by ``test_auto_size.py``, which runs it with the side virtualenv's python: JSON on stdin
(the tiny model's path and cases of one rank's budget and device bytes), JSON on stdout. Each
case builds no pool: a bare ``MHATokenToKVPool`` carries the device bytes as
``host_capacity_bytes`` (the figure ``_pool_bytes`` reads first), and SGLang's own
``host_memory_budget_scope`` hands ``auto_size_hicache`` the rank's budget, as the kv-cache
builder does around it. The server arguments are published as SGLang's scheduler does, so the
fraction and the ratio come from SGLang's own resolution of the flags.
"""

from __future__ import annotations

import json
import logging
import sys
import types


def main() -> None:
    request = json.load(sys.stdin)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logging.getLogger("sglang.srt.mem_cache.hicache_auto_size").addHandler(Keep())
    logging.getLogger("sglang.srt.mem_cache.hicache_auto_size").setLevel(logging.INFO)

    from sglang.srt.mem_cache import pool_host
    from sglang.srt.mem_cache.hicache_auto_size import _ALLOCATION_SLACK_FRACTION, auto_size_hicache
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.base import host_memory_budget_scope
    from sglang.srt.runtime_context import get_memory, publish
    from sglang.srt.server_args import ServerArgs

    out: dict[str, object] = {
        "reserve_bytes": pool_host.base.HICACHE_HOST_MEMORY_RESERVE_BYTES,
        "slack": _ALLOCATION_SLACK_FRACTION,
        "fractions": {},
        "ratios": [],
    }
    flags = {"none": {}, "ratio": {"hicache_ratio": 1.5}, "size": {"hicache_size": 4}}
    for name, extra in flags.items():
        args = ServerArgs(
            model_path=request["model"], device="cpu", enable_hierarchical_cache=True, **extra
        )
        publish(args, role="scheduler")
        out["fractions"][name] = get_memory().hicache_host_memory_fraction  # type: ignore[index]
    args = ServerArgs(model_path=request["model"], device="cpu", enable_hierarchical_cache=True)
    for case in request["cases"]:
        publish(args, role="scheduler")
        pool = MHATokenToKVPool.__new__(MHATokenToKVPool)
        pool.host_capacity_bytes = case["device_bytes"]
        allocator = types.SimpleNamespace(get_kvcache=lambda pool=pool: pool)
        params = types.SimpleNamespace(
            token_to_kv_pool_allocator=allocator, req_to_token_pool=None, mtp_draft_device_pools=[]
        )
        budget = host_memory_budget_scope(case["budget_bytes"])
        with budget, auto_size_hicache(params, None, enabled=True):
            out["ratios"].append(get_memory().hicache_ratio)  # type: ignore[attr-defined]
    out["log"] = [line for line in records if line.startswith("HiCache auto-sizing")]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
