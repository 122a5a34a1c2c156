"""Progress over a whole start, the ETA, the log watcher's drafts and the applied-setting check."""

from __future__ import annotations

from bot.agent.cmdline import HiCacheSetting, read_topology
from bot.agent.engine.gpu_wait import gpu_indices
from bot.agent.engine.progress import ProgressModel, eta_seconds
from bot.agent.engine.served_setting import reported_mismatch
from bot.agent.engine.watcher import StartWatcher

# The typical seconds of each phase (_progress's table, from the field notes' ~10-minute start).
TYPICAL = {"starting": 5, "init": 26, "load_weights": 480, "kv_pool": 6, "cuda_graph": 14,
           "host_pool": 2, "http": 3, "warmup": 6, "verifying": 1}  # fmt: skip


def test_progress_is_weighted_by_typical_durations_and_never_goes_back() -> None:
    """Half the shards loaded is (5 + 26 + 240) / total with no pool; an earlier phase later
    does not lower it; ready is exactly 1."""
    model = ProgressModel()
    total = sum(TYPICAL.values())
    assert model.at("load_weights", 0.5) == round((5 + 26 + 240) / total, 4)
    assert model.at("init") == round((5 + 26 + 240) / total, 4)
    assert model.at("warmup", 1.0) < 1.0
    assert model.at("ready") == 1.0


def test_the_pin_weighs_its_size() -> None:
    """A 110 GB/rank pool adds 60 s (the upstream pin rate) to the host_pool phase's weight."""
    model = ProgressModel(host_gb_per_rank=110)
    total = sum(TYPICAL.values()) + 60
    before_pool = sum(v for k, v in TYPICAL.items() if k in ("starting", "init", "load_weights",
                                                             "kv_pool", "cuda_graph"))  # fmt: skip
    assert model.at("http") == round((before_pool + 2 + 60) / total, 4)


def test_eta_uses_history_then_extrapolates() -> None:
    """Within the expected time the ETA is what is left of it; past it, extrapolated."""
    assert eta_seconds(100, 0.2, 600) == 500
    assert eta_seconds(700, 0.5, 600) == 700
    assert eta_seconds(10, 0.01, None) is None


def test_watcher_turns_log_lines_into_drafts_and_figures() -> None:
    """The 0.5.9 lines of a start give phase drafts, shard progress and the pool figures."""
    watcher = StartWatcher(ProgressModel(), ranks=8)
    log = (
        "[2026-02-24 11:18:37 TP0] Init torch distributed begin.\n"
        "[2026-02-24 11:18:40 TP0] Load weight begin. avail mem=94.51 GB\n"
        "Loading safetensors checkpoint shards:  50% Completed | 32/64 [00:11<00:29,  1.58it/s]\n"
        "[2026-02-24 11:26:40 TP0] KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB\n"
        "[2026-02-24 11:26:50 TP0] max_total_num_tokens=159274, chunked_prefill_size=8192\n"
        "[2026-02-24 11:26:51 TP0] Allocating 44.77 GB host memory for hierarchical KV cache.\n"
    )
    drafts = watcher.feed(log, now=0.0)
    assert [d.phase for d in drafts][:3] == ["init", "load_weights", "load_weights"]
    assert drafts[2].data == {"shard": 32, "shards": 64}
    host = [d for d in drafts if d.step == "host_pool:figures"]
    assert host[0].data["host_gb_total"] == round(44.77 * 8, 2)
    assert watcher.figures.device_tokens == 159274
    assert watcher.figures.host_gb_per_rank == 44.77
    # 0.5.9 logs no token count: 44.77e9 B / (10.42 GiB / 159274) per token.
    assert watcher.figures.host_tokens() == int(44.77e9 // (10.42 * 1024**3 / 159274))
    assert [d.step for d in watcher.tick(now=1e6)] == ["pin:9"]


def test_ratio_host_tokens_follow_sglangs_rule_and_graph_bars_are_thinned() -> None:
    """With the applied ratio known, host tokens are int(device x ratio) // page + 1 pages
    (ratio 4 on 159,274 tokens: 637,097); 52 graph bar steps give about ten drafts."""
    watcher = StartWatcher(ProgressModel(), ranks=8, ratio=4.0, page_size=1)
    log = (
        "[2026-02-24 11:26:40 TP0] KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB\n"
        + "".join(
            f"\rCapturing batches (bs=1 avail_mem=1.82 GB): {i * 100 // 52}%|##| {i}/52 [00:09]"
            for i in range(53)
        )
        + "\n[2026-02-24 11:26:51 TP0] Allocating 44.77 GB host memory for hierarchical KV "
        "cache.\n"
    )
    drafts = watcher.feed(log, now=0.0)
    assert watcher.figures.host_tokens() == (159274 * 4 // 1 + 1) * 1
    graphs = [d.data["graph"] for d in drafts if "graph" in d.data]
    assert graphs[0] == 0
    assert graphs[-1] == 52
    assert len(graphs) <= 12


def test_reported_setting_check() -> None:
    """A size is compared alone (ratio stays at its default beside it); a ratio needs no size."""
    size48 = HiCacheSetting(enabled=True, size_gb=48)
    served = {"enable_hierarchical_cache": True, "hicache_ratio": 2.0, "hicache_size": 48}
    assert reported_mismatch(served, size48) is None
    ratio4 = HiCacheSetting(enabled=True, ratio=4.0)
    assert reported_mismatch(served, ratio4) is not None
    assert reported_mismatch({**served, "hicache_size": 0, "hicache_ratio": 4.0}, ratio4) is None
    assert "enable" in (reported_mismatch({"enable_hierarchical_cache": False}, ratio4) or "")


def test_ranks_and_gpus_from_the_command_line() -> None:
    """TP 8 is eight local ranks on GPUs 0-7 unless CUDA_VISIBLE_DEVICES says otherwise."""
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8"]
    assert read_topology(argv).local_ranks == 8
    assert gpu_indices(2, {}) == [0, 1]
    assert gpu_indices(2, {"CUDA_VISIBLE_DEVICES": "4,5"}) == [4, 5]
