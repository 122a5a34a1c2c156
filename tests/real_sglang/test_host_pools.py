"""The planner's host pools against SGLang 0.5.23's own constructors, on the shapes that cannot
start here (PD decode, buffer_only, Mooncake, hybrid sliding-window models).

``host_pool_probe.py`` runs SGLang's code in the side virtualenv, on real device pools built on
CPU, with only the host buffers stubbed (docs/sglang.md, Host pools); each test gives the
planner the same shape and expects the same tokens and bytes, to the byte.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bot.planner import (
    ChangeRequest,
    DevicePool,
    HostMemory,
    HostPoolFlags,
    HybridPools,
    ServerFacts,
    SGLangVersion,
    default_ratio,
    make_plan,
    mooncake_segment,
)
from tests.real_sglang._side import DEVICE_TOKENS, SERVER_ENV, SideVenv
from tests.real_sglang.conftest import clean_environ

pytestmark = pytest.mark.real_sglang

PROBE = Path(__file__).with_name("host_pool_probe.py")
PLENTY = HostMemory(available_bytes=10**15)
V0523 = SGLangVersion.parse("0.5.23")
# A device pool on CPU: 2 KV heads of 64 bf16 values, 4 layers: 2 x 2 x 64 x 2 x 4 = 2,048 B.
DEVICE = {"page_size": 1, "head_num": 2, "head_dim": 64, "layer_num": 4}
PER_TOKEN = 2048
# A hybrid model: full-attention layers 1 and 5 (1,024 B per token), six sliding-window layers
# (3,072 B), the pools of 0.5.23's "full_layer_tokens=32997, swa_layer_tokens=26397".
HYBRID_DEVICE = {
    "size": 32997,
    "size_swa": 26397,
    "page_size": 1,
    "head_num": 2,
    "head_dim": 64,
    "full_layers": [1, 5],
    "swa_layers": [0, 2, 3, 4, 6, 7],
}
HYBRID = HybridPools(
    full_tokens=32997, swa_tokens=26397, full_bytes_per_token=1024, swa_bytes_per_token=3072
)
MOONCAKE_EXTRA = {"master_server_address": "127.0.0.1:50051", "global_segment_size": "16gb"}
MOONCAKE_ENV = {"MOONCAKE_MASTER": "127.0.0.1:50051", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "3221225472"}
DECODE = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "fake"}


def _cases(side: SideVenv) -> list[dict[str, Any]]:
    base = {
        "model_path": str(side.model),
        "device": "cpu",
        "disable_overlap_schedule": True,
        "attention_backend": "torch_native",
        "max_total_tokens": DEVICE_TOKENS,
        "max_running_requests": 16,
        "hicache_io_backend": "direct",
        "hicache_mem_layout": "layer_first",
    }
    buffer_only = {
        "enable_hierarchical_cache": True,
        "hicache_host_memory_mode": "buffer_only",
        "hicache_storage_backend": "file",
    }
    offload = {
        **DECODE,
        "disaggregation_decode_enable_offload_kvcache": True,
        "hicache_storage_backend": "file",
    }
    return [
        {"shape": "plain", "args": {**base, **buffer_only}, "device": {**DEVICE, "size": 5000}},
        {
            "shape": "hybrid",
            "args": {**base, "enable_hierarchical_cache": True, "hicache_size": 10},
            "device": HYBRID_DEVICE,
        },
        {
            "shape": "hybrid",
            "args": {**base, "enable_hierarchical_cache": True, "hicache_ratio": 2.0},
            "device": HYBRID_DEVICE,
        },
        {
            "shape": "decode",
            "args": {**base, **DECODE},
            "device": {**DEVICE, "size": 20000},
            "max_context_len": 8196,
        },
        {
            "shape": "decode",
            "args": {**base, **offload},
            "device": {**DEVICE, "size": 20000},
            "max_context_len": 8196,
        },
        {"shape": "mooncake", "extra_config": MOONCAKE_EXTRA, "tp_size": 8, "pp_size": 1},
        {"shape": "mooncake", "environ": MOONCAKE_ENV, "tp_size": 2, "pp_size": 2},
        {
            "shape": "hybrid",
            "args": {**base, "enable_hierarchical_cache": True, "hicache_size": 7, "page_size": 16},
            "device": {**HYBRID_DEVICE, "size": 32992, "size_swa": 26384, "page_size": 16},
        },
        {
            "shape": "decode",
            "args": {**base, **DECODE, "page_size": 16},
            "device": {**DEVICE, "size": 20000, "page_size": 16},
            "max_context_len": 8196,
        },
    ]


@pytest.fixture(scope="module")
def sglang(side: SideVenv) -> list[dict[str, Any]]:
    """What SGLang's own code sizes for each case, in order (one probe run for the module)."""
    done = subprocess.run(
        [str(side.python), str(PROBE)],
        input=json.dumps(_cases(side)),
        capture_output=True,
        text=True,
        env={**clean_environ(), **SERVER_ENV},
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    failed = [answer for answer in answers if "error" in answer]
    assert not failed, failed
    return answers


def _tokens_bytes(plan: Any, name: str) -> tuple[int | None, int]:
    pool = next(pool for pool in plan.host_pools if pool.name == name)
    return pool.tokens, pool.bytes


def test_buffer_only_is_planned_at_sglangs_1_2(sglang: list[dict[str, Any]]) -> None:
    """buffer_only with a storage backend: SGLang resolves the ratio to 1.2 and sizes the host
    pool at it; the planner's default ratio and pool are the same."""
    answer = sglang[0]
    flags = HostPoolFlags(host_memory_mode="buffer_only", storage_backend="file")
    ratio, _ = default_ratio(flags, hicache_enabled=True)
    assert ratio == answer["ratio"]
    server = ServerFacts(
        ranks=1,
        device_pool=DevicePool(tokens=5000, bytes_per_token=PER_TOKEN),
        version=V0523,
        host_pool_flags=flags,
    )
    plan = make_plan(ChangeRequest(ratio=ratio), server, PLENTY)
    kv = answer["kv"]
    assert _tokens_bytes(plan, "KV") == (kv["tokens"], kv["tokens"] * kv["bytes_per_token"])


def test_a_hybrid_models_size_split_is_sglangs_to_the_byte(sglang: list[dict[str, Any]]) -> None:
    """--hicache-size 10 on a hybrid model: SGLang 0.5.23 splits the 10 GB by device bytes; the
    planner's full and sliding-window pools match its tokens and bytes exactly."""
    answer = sglang[1]
    assert answer["full_device_bytes"] == (32997 + 1) * 1024  # the split's inputs agree
    assert answer["swa_device_bytes"] == (26397 + 1) * 3072
    server = ServerFacts(
        ranks=1,
        device_pool=DevicePool(tokens=32997, bytes_per_token=1024),
        version=V0523,
        hybrid_pools=HYBRID,
    )
    plan = make_plan(ChangeRequest(size_gb=10), server, PLENTY)
    for name, key in (("KV", "full"), ("swa", "swa")):
        pool = answer[key]
        assert _tokens_bytes(plan, name) == (
            pool["tokens"],
            pool["tokens"] * pool["bytes_per_token"],
        )


def test_a_hybrid_models_ratio_pools_are_sglangs(sglang: list[dict[str, Any]]) -> None:
    """--hicache-ratio 2 on the same hybrid model: each pool twice its own tokens, as SGLang."""
    answer = sglang[2]
    server = ServerFacts(
        ranks=1,
        device_pool=DevicePool(tokens=32997, bytes_per_token=1024),
        version=V0523,
        hybrid_pools=HYBRID,
    )
    plan = make_plan(ChangeRequest(ratio=2), server, PLENTY)
    assert _tokens_bytes(plan, "KV")[0] == answer["full"]["tokens"]
    assert _tokens_bytes(plan, "swa")[0] == answer["swa"]["tokens"]


def test_the_decode_retraction_backup_is_sglangs(sglang: list[dict[str, Any]]) -> None:
    """A decode server without HiCache: SGLang picks the host-pool backup and raises 0.2 to
    8,195 / 20,000 so the longest request fits; the planner picks the same ratio and pool."""
    answer = sglang[3]
    assert answer["backend"] == "host_pool"
    flags = HostPoolFlags(disaggregation_mode="decode")
    ratio, why = default_ratio(flags, False, "MHA", 20000, 8196 - 1)
    assert ratio == answer["ratio"]
    assert "longest request" in why
    server = ServerFacts(
        ranks=1,
        device_pool=DevicePool(tokens=20000, bytes_per_token=PER_TOKEN),
        version=V0523,
        host_pool_flags=flags,
    )
    plan = make_plan(ChangeRequest(ratio=ratio), server, PLENTY)
    kv = answer["kv"]
    assert _tokens_bytes(plan, "KV") == (kv["tokens"], kv["tokens"] * kv["bytes_per_token"])


def test_decode_offload_is_planned_as_sglangs_offload_pool(sglang: list[dict[str, Any]]) -> None:
    """With decode offload SGLang keeps CPU tensors for retraction, resolves the ratio to 2 and
    builds the offload manager's pool at it; the planner's "decode offload KV" is that pool."""
    answer = sglang[4]
    assert answer["backend"] == "cpu_tensor"
    flags = HostPoolFlags(disaggregation_mode="decode", decode_offload=True, storage_backend="file")
    ratio, _ = default_ratio(flags, False, "MHA", 20000, 8196 - 1)
    assert ratio == answer["ratio"]
    server = ServerFacts(
        ranks=1,
        device_pool=DevicePool(tokens=20000, bytes_per_token=PER_TOKEN),
        version=V0523,
        host_pool_flags=flags,
    )
    plan = make_plan(ChangeRequest(ratio=ratio), server, PLENTY)
    kv = answer["kv"]
    expected = (kv["tokens"], kv["tokens"] * kv["bytes_per_token"])
    assert _tokens_bytes(plan, "decode offload KV") == expected


@pytest.mark.parametrize(
    ("index", "extra", "environ", "ranks"),
    [(5, MOONCAKE_EXTRA, {}, 8), (6, None, MOONCAKE_ENV, 4)],
)
def test_mooncakes_segment_per_rank_is_sglangs(
    sglang: list[dict[str, Any]],
    index: int,
    extra: dict[str, str] | None,
    environ: dict[str, str],
    ranks: int,
) -> None:
    """The segment MooncakeStore asks its client for, from the extra config (16 GiB over TP 8)
    and from the environment (3 GiB over TP 2 x PP 2), is the planner's Mooncake pool."""
    segment = mooncake_segment(extra, environ)
    flags = HostPoolFlags(storage_backend="mooncake", mooncake=segment, storage_ranks=ranks)
    server = ServerFacts(
        ranks=1,
        device_pool=DevicePool(tokens=5000, bytes_per_token=PER_TOKEN),
        version=V0523,
        host_pool_flags=flags,
    )
    plan = make_plan(ChangeRequest(size_gb=1), server, PLENTY)
    assert _tokens_bytes(plan, "Mooncake segment")[1] == sglang[index]["segment_per_rank"]


def test_pages_of_16_round_the_hybrid_split_and_the_backup_floor_as_sglang(
    sglang: list[dict[str, Any]],
) -> None:
    """Pages of 16: the hybrid split of 7 GB and the retraction floor's ceil_align (8,195 up
    to 8,208 tokens) give SGLang's page-aligned pools, to the token."""
    hybrid, decode = sglang[7], sglang[8]
    pools = HybridPools(32992, 26384, 1024, 3072)
    server = ServerFacts(
        ranks=1,
        device_pool=DevicePool(tokens=32992, bytes_per_token=1024),
        page_size=16,
        version=V0523,
        hybrid_pools=pools,
    )
    plan = make_plan(ChangeRequest(size_gb=7), server, PLENTY)
    assert _tokens_bytes(plan, "KV")[0] == hybrid["full"]["tokens"]
    assert _tokens_bytes(plan, "swa")[0] == hybrid["swa"]["tokens"]
    flags = HostPoolFlags(disaggregation_mode="decode")
    ratio, _ = default_ratio(flags, False, "MHA", 20000, 8196 - 1, page_size=16)
    assert ratio == decode["ratio"]
    backup = ServerFacts(
        ranks=1,
        device_pool=DevicePool(tokens=20000, bytes_per_token=PER_TOKEN),
        page_size=16,
        version=V0523,
        host_pool_flags=flags,
    )
    plan = make_plan(ChangeRequest(ratio=ratio), backup, PLENTY)
    assert _tokens_bytes(plan, "KV")[0] == decode["kv"]["tokens"]
