"""The start follower on deployments as they are run: the target's pool with a draft beside
it, and extra host pools in the host total (the figures the ready message reports)."""

from __future__ import annotations

from bot.agent.engine.progress import ProgressModel
from bot.agent.engine.watcher import StartWatcher
from tests.startup.conftest import read_log


def test_follower_keeps_the_target_pool_and_reports_the_draft_beside_it() -> None:
    """A speculative-decoding start: the device pool is the target's 15.13 GiB, the draft's
    0.25 GiB is its own figure and its own event, never the device pool."""
    watcher = StartWatcher(ProgressModel(), ranks=4)
    drafts = watcher.feed(read_log("draft_mtp_v0.5.9.log"), now=0.0)
    assert watcher.figures.kv_gib_per_rank == 15.13
    assert watcher.figures.draft_kv_gib == 0.25
    assert watcher.figures.device_tokens == 231120
    steps = [d.step for d in drafts]
    assert steps.count("kv_pool:figures") == 1
    assert steps.count("kv_pool:draft") == 1


def test_follower_takes_the_full_attention_pool_once_max_total_tokens_names_it() -> None:
    """A hybrid start logs the sliding-window pool first; once `max_total_num_tokens=150430`
    arrives, the device pool is the full-attention one (3.44 + 3.44 GiB)."""
    watcher = StartWatcher(ProgressModel(), ranks=4)
    watcher.feed(read_log("hybrid_swa_v0.5.23.log"), now=0.0)
    assert watcher.figures.kv_gib_per_rank == round(3.44 + 3.44, 2)
    assert watcher.figures.device_tokens == 150430


def test_follower_counts_an_indexer_host_pool_in_the_host_total() -> None:
    """126.61 GB KV host pool and a 29.02 GB DSA indexer per rank: 155.63 GB per rank in all."""
    watcher = StartWatcher(ProgressModel(), ranks=4)
    drafts = watcher.feed(read_log("dsa_indexer_v0.5.23.log"), now=0.0)
    assert watcher.figures.host_gb_per_rank == 126.61
    assert watcher.figures.host_extra_gb == {"DSA indexer": 29.02}
    assert watcher.figures.host_total_gb_per_rank == round(126.61 + 29.02, 2)
    extra = [d for d in drafts if d.step == "host_pool:DSA indexer"]
    assert extra[0].data["host_gb_total"] == round(4 * (126.61 + 29.02), 2)


def test_follower_keeps_the_ratio_0_5_23_s_auto_sizing_logged() -> None:
    """Two ranks log `HiCache auto-sizing: ratio 2.000 -> R`: the figures keep the least R,
    the ratio every rank's pool is sized on, to compare with the planned one."""
    watcher = StartWatcher(ProgressModel(), ranks=2)
    line = (
        "[2026-12-01 21:00:00 TP{rank}] HiCache auto-sizing: ratio 2.000 -> {ratio}; 5.6 GiB host "
        "memory per rank (fraction 0.80, 2 ranks on this host), host pools 5.3 GiB.\n"
    )
    watcher.feed(line.format(rank=0, ratio="1.084") + line.format(rank=1, ratio="1.083"), 0.0)
    assert watcher.figures.auto_ratio == 1.083
    assert StartWatcher(ProgressModel(), ranks=2).figures.auto_ratio is None
