"""Runs SGLang 0.5.23's own host-pool code on the shapes that cannot start here, and prints what
it sizes: run with the side virtualenv's python, cases as JSON on stdin, answers as JSON on
stdout (one object per case, in order).

Nothing here computes a size: SGLang's constructors and resolvers do, on real device pools
built on CPU, with the server's resolved arguments published as a launch publishes them. Only
the host allocation is stubbed: the host pools' buffers are allocated on PyTorch's ``meta``
device (shape without memory), so a 20 GB pool costs nothing here; and Mooncake's client, which
is not installed, is a stand-in that records the segment SGLang asks it for.

A case is ``{"shape": ..., "args": {ServerArgs fields}, ...}``:

- ``plain``: ``device`` (size, page_size, head_num, head_dim, layer_num) -> the KV host pool
  ``build_kv_host_pool`` builds;
- ``hybrid``: ``device`` plus size_swa and the full/SWA layer ids -> both host pools, sized as
  ``build_hybrid_swa_stack`` sizes them (``_split_hicache_size``, ``build_hybrid_swa_group``);
- ``decode``: ``device`` and ``max_context_len`` -> ``resolve_decode_retraction_backup``'s
  backend and ratio, and the host pool at that ratio;
- ``mooncake``: ``extra_config``, ``environ``, tp_size, pp_size -> the per-rank segment
  ``MooncakeStore`` passes to its client's ``setup``.
"""

from __future__ import annotations

import json
import os
import sys
import types
from typing import Any

import torch


def _stub_host_allocation() -> None:
    import sglang.srt.mem_cache.pool_host.common as common

    def on_meta(dims: tuple[int, ...], dtype: torch.dtype, *args: Any, **kwargs: Any) -> Any:
        return torch.empty(dims, dtype=dtype, device="meta")

    common.ALLOC_MEMORY_FUNCS.clear()
    common.ALLOC_MEMORY_FUNCS.default_factory = lambda: on_meta


def _publish(args: dict[str, Any]) -> Any:
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(**args)
    server_args.resolve_once()
    get_context().set_server_args(server_args)
    return server_args


def _device_pool(device: dict[str, Any]) -> Any:
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    return MHATokenToKVPool(
        size=device["size"],
        page_size=device["page_size"],
        dtype=torch.bfloat16,
        head_num=device["head_num"],
        head_dim=device["head_dim"],
        layer_num=device["layer_num"],
        device="cpu",
        enable_memory_saver=False,
    )


def _pool(host: Any) -> dict[str, Any]:
    return {"tokens": int(host.size), "bytes_per_token": int(host.size_per_token)}


def _plain(case: dict[str, Any]) -> dict[str, Any]:
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import build_kv_host_pool
    from sglang.srt.runtime_context import get_memory

    _publish(case["args"])
    device = _device_pool(case["device"])
    host = build_kv_host_pool(kv_pool=device, page_size=case["device"]["page_size"])
    return {"ratio": get_memory().hicache_ratio, "kv": _pool(host)}


def _hybrid(case: dict[str, Any]) -> dict[str, Any]:
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import (
        _split_hicache_size,
        build_hybrid_swa_group,
    )
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.runtime_context import get_memory

    _publish(case["args"])
    device = case["device"]
    pool = SWAKVPool(
        size=device["size"],
        size_swa=device["size_swa"],
        page_size=device["page_size"],
        dtype=torch.bfloat16,
        head_num=device["head_num"],
        head_dim=device["head_dim"],
        swa_attention_layer_ids=device["swa_layers"],
        full_attention_layer_ids=device["full_layers"],
        device="cpu",
    )
    kv_size = swa_size = None
    if get_memory().hicache_size > 0:  # as build_hybrid_swa_stack does
        kv_size, swa_size = _split_hicache_size(
            get_memory().hicache_size, (pool.full_kv_pool, pool.swa_kv_pool)
        )
    full_mapping = {layer: index for index, layer in enumerate(device["full_layers"])}
    swa_mapping = {layer: index for index, layer in enumerate(device["swa_layers"])}
    group = build_hybrid_swa_group(
        page_size=device["page_size"],
        full_kv_pool=pool.full_kv_pool,
        swa_kv_pool=pool.swa_kv_pool,
        full_layer_mapping=full_mapping,
        swa_layer_mapping=swa_mapping,
        use_mla=False,
        kv_host_size=kv_size,
        swa_host_size=swa_size,
    )
    return {
        "full": _pool(group.entry_map[PoolName.KV].host_pool),
        "swa": _pool(group.entry_map[PoolName.SWA].host_pool),
        "full_device_bytes": int(sum(pool.full_kv_pool.get_kv_size_bytes())),
        "swa_device_bytes": int(sum(pool.swa_kv_pool.get_kv_size_bytes())),
    }


def _decode(case: dict[str, Any]) -> dict[str, Any]:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import build_kv_host_pool
    from sglang.srt.mem_cache.kv_cache_builder import resolve_decode_retraction_backup
    from sglang.srt.runtime_context import get_memory

    server_args = _publish(case["args"])
    device = _device_pool(case["device"])
    requests = types.SimpleNamespace(max_context_len=case["max_context_len"])
    allocator = types.SimpleNamespace(get_kvcache=lambda: device)
    runner = types.SimpleNamespace(
        mtp_draft_device_pools=(),
        model_config=ModelConfig.from_server_args(server_args),
        spec_algorithm=types.SimpleNamespace(is_dspark=lambda: False),
    )
    worker = types.SimpleNamespace(
        get_memory_pool=lambda: (requests, allocator),
        is_hybrid_swa=False,
        model_runner=runner,
    )
    backend = resolve_decode_retraction_backup(tp_worker=worker)
    host = build_kv_host_pool(kv_pool=device, page_size=case["device"]["page_size"])
    return {"backend": backend, "ratio": get_memory().hicache_ratio, "kv": _pool(host)}


def _mooncake(case: dict[str, Any]) -> dict[str, Any]:
    asked: dict[str, int] = {}

    class Client:
        """Mooncake's MooncakeDistributedStore, as far as MooncakeStore's start uses it."""

        def __init__(self) -> None:
            self.kept: dict[str, bytes] = {}

        def setup(self, *args: Any, **kwargs: Any) -> int:
            asked["segment"] = int(args[2])
            return 0

        def put(self, key: str, value: bytes) -> int:
            self.kept[key] = value
            return 0

        def is_exist(self, key: str) -> int:
            return 1 if key in self.kept else 0

        def get(self, key: str) -> bytes:
            return self.kept[key]

    store_module = types.ModuleType("mooncake.store")
    store_module.MooncakeDistributedStore = Client  # type: ignore[attr-defined]
    sys.modules["mooncake"] = types.ModuleType("mooncake")
    sys.modules["mooncake.store"] = store_module
    for name in [n for n in os.environ if n.startswith(("MOONCAKE_", "SGLANG_HICACHE_MOONCAKE"))]:
        del os.environ[name]
    os.environ.update(case.get("environ", {}))
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore

    config = HiCacheStorageConfig(
        tp_rank=0,
        tp_size=case["tp_size"],
        pp_rank=0,
        pp_size=case["pp_size"],
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=False,
        is_page_first_layout=True,
        model_name=None,
        extra_config=case.get("extra_config"),
    )
    try:
        MooncakeStore(storage_config=config, mem_pool=None)
    except Exception as exc:  # after setup, the start needs more of a real client
        if "segment" not in asked:
            return {"error": f"{type(exc).__name__}: {exc}"}
    return {"segment_per_rank": asked["segment"]}


SHAPES = {"plain": _plain, "hybrid": _hybrid, "decode": _decode, "mooncake": _mooncake}


def main() -> None:
    _stub_host_allocation()
    answers = []
    for case in json.load(sys.stdin):
        try:
            answers.append(SHAPES[case["shape"]](case))
        except Exception as exc:
            answers.append({"error": f"{type(exc).__name__}: {exc}"})
    sys.stdout.write("\n" + json.dumps(answers) + "\n")


if __name__ == "__main__":
    main()
