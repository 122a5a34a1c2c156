"""Logs of deployments as they are run: a draft model's pool, several pools per rank, extra
host pools, logs without a token count or a rank prefix, and the prefixes seen in the wild.

Expected figures come from each fixture's header (the pools SGLang's code allocates for that
model), never from the parser.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from bot.cli import main
from bot.startup import (
    DevicePool,
    HostPool,
    PoolKind,
    RankSeen,
    SlidingWindowFigures,
    build_report,
)
from tests.startup.conftest import LOGS, parse_all, read_log


def test_draft_pool_is_reported_beside_the_target_pool_never_instead() -> None:
    """With speculative decoding the device pool is the target's 15.13 GiB, the draft's 0.25 GiB
    is `draft_pool`, on every one of the four `DPn TPn EPn` ranks."""
    report = build_report(parse_all(read_log("draft_mtp_v0.5.9.log")))
    ranks = tuple(f"DP{i} TP{i} EP{i}" for i in range(4))
    assert report.ranks == ranks
    assert report.kv_gib_per_rank == dict.fromkeys(ranks, 15.13)
    assert report.device_tokens_per_rank == dict.fromkeys(ranks, 231120)
    assert report.draft_pool is not None
    assert (report.draft_pool.tokens, report.draft_pool.kv_gib) == (231120, 0.25)
    assert [(p.kind, p.kv_gib) for p in report.pools] == [
        (PoolKind.TARGET, 15.13),
        (PoolKind.DRAFT, 0.25),
    ]
    assert report.ready


def test_draft_pool_is_marked_as_logged_after_graph_capture() -> None:
    """The parser flags the second pool of a rank as logged once CUDA graphs began."""
    pools = [e for e in parse_all(read_log("draft_mtp_v0.5.9.log")) if isinstance(e, DevicePool)]
    rank0 = [(p.index, p.after_graphs, p.kv_gib) for p in pools if p.rank == "DP0 TP0 EP0"]
    assert rank0 == [(0, False, 15.13), (1, True, 0.25)]


def test_hybrid_pools_are_reported_by_kind_and_the_full_attention_pool_is_the_device_pool() -> None:
    """Sliding-window 120,344 tokens (8.26 + 8.26 GiB), full attention 150,430 (3.44 + 3.44),
    then a draft: `max_total_num_tokens=150430` names the full-attention pool."""
    report = build_report(parse_all(read_log("hybrid_swa_v0.5.23.log")))
    assert report.ranks == tuple(f"ATTN_CP{i} TP{i}" for i in range(4))
    assert [(p.kind, p.tokens, p.kv_gib) for p in report.pools] == [
        (PoolKind.OTHER, 120344, round(8.26 + 8.26, 2)),
        (PoolKind.TARGET, 150430, round(3.44 + 3.44, 2)),
        (PoolKind.DRAFT, 150430, round(0.29 + 0.29, 2)),
    ]
    assert set(report.kv_gib_per_rank.values()) == {6.88}
    assert report.device_tokens == 150430
    assert report.device_pool_undecided is None


def test_several_pools_before_max_total_num_tokens_leave_the_device_pool_undecided() -> None:
    """Cut before `max_total_num_tokens=`, a hybrid log's two pools cannot be told apart: no
    device figures, and a reason naming both counts."""
    text = read_log("hybrid_swa_v0.5.23.log")
    report = build_report(parse_all(text[: text.index("Capture target decode CUDA graph end")]))
    assert report.kv_gib_per_rank == {}
    assert report.device_pool_undecided is not None
    assert "120,344" in report.device_pool_undecided
    assert "150,430" in report.device_pool_undecided


def test_a_hybrid_models_sliding_window_lines_give_both_device_pools() -> None:
    """0.5.23's split line and SWAKVPool's line: full attention 32,997 tokens (0.28 + 0.28
    GiB), sliding window 26,397 (0.23 + 0.23), 1.02 GiB in all; the full pool is the target,
    and both host pools (1.22 + 0.97 GB) are the rank's host RAM."""
    report = build_report(parse_all(read_log("hybrid_swa_pools_v0.5.23.log")))
    assert report.sliding_window == SlidingWindowFigures(
        full_tokens=32997, swa_tokens=26397, kv_gib=1.02, full_kv_gib=0.56, swa_kv_gib=0.46
    )
    assert [(p.kind, p.tokens, p.label) for p in report.pools] == [
        (PoolKind.TARGET, 32997, "Full"),
        (PoolKind.OTHER, 26397, "SWA"),
    ]
    assert report.host_total_gb_per_rank == {"TP0": 2.19, "TP1": 2.19}
    # The full-attention pool ("Allocating full ...") is the KV host pool; "swa" beside it.
    assert report.host_gb_per_rank == {"TP0": 1.22, "TP1": 1.22}
    assert report.host_tokens_per_rank == {"TP0": 65995, "TP1": 65995}
    assert report.host_extra_gb_per_rank == {"TP0": {"swa": 0.97}, "TP1": {"swa": 0.97}}
    assert report.to_dict()["sliding_window"]["swa_tokens"] == 26397


def test_the_sliding_window_split_decides_the_device_pool_before_max_total_is_logged() -> None:
    """Cut before `max_total_num_tokens=`, two pools per rank would be undecidable; the split
    line names the full-attention pool's 32,997 tokens, so the report gives the device pool."""
    text = read_log("hybrid_swa_pools_v0.5.23.log")
    report = build_report(parse_all(text[: text.index("max_total_num_tokens")]))
    assert report.device_pool_undecided is None
    assert report.kv_gib_per_rank == {"TP0": 0.56, "TP1": 0.56}
    assert report.device_tokens == 32997
    without = "\n".join(
        line for line in text[: text.index("max_total_num_tokens")].splitlines()
        if "sliding window" not in line and "SWAKVPool" not in line
    )  # fmt: skip
    assert build_report(parse_all(without + "\n")).device_pool_undecided is not None


def test_dsa_indexer_is_an_extra_host_pool_counted_in_the_total() -> None:
    """126.61 GB KV host pool and a 29.02 GB DSA indexer per rank: 155.63 GB of RAM per rank,
    622.52 GB on four ranks; behind a container runtime's timestamps, with `PPn TPn` prefixes."""
    report = build_report(parse_all(read_log("dsa_indexer_v0.5.23.log")))
    ranks = ("PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1")
    assert report.ranks == ranks
    assert report.host_gb_per_rank == dict.fromkeys(ranks, 126.61)
    assert report.host_extra_gb_per_rank == {r: {"DSA indexer": 29.02} for r in ranks}
    assert report.host_total_gb_per_rank == dict.fromkeys(ranks, round(126.61 + 29.02, 2))
    assert report.host_gb_total == round(4 * (126.61 + 29.02), 2)
    assert report.host_tokens_per_rank == dict.fromkeys(ranks, 2818048)
    assert report.started_at == datetime(2026, 9, 23, 8, 2, 0)  # SGLang's time, not the runtime's
    assert report.ready


def test_extra_host_pool_line_with_packed_draft_layers_is_read() -> None:
    """The indexer line that names packed MTP layers gives the same pool name and GB."""
    line = (
        "[2026-09-23 08:11:32 TP0] Allocating 35.25 GB host memory for DSA indexer "
        "(layout=page_first), packed MTP layers: target_layers=61, draft_layers=1, "
        "total_layers=62.\n"
    )
    pools = [(e.gb, e.pool) for e in parse_all(line) if isinstance(e, HostPool)]
    assert pools == [(35.25, "DSA indexer")]


def test_single_process_log_without_token_count_has_one_rank_and_the_max_total_tokens() -> None:
    """No prefix and `K size: 3.10 GB, V size: 3.10 GB.` without `#tokens`: one rank, 50,790
    device tokens from `max_total_num_tokens=`, 6.20 GiB (K + V)."""
    report = build_report(parse_all(read_log("single_rank_no_tokens_v0.4.log")))
    assert report.ranks == ("",)
    assert report.to_dict()["rank_count"] == 1
    assert report.device_tokens == 50790
    assert report.kv_gib_per_rank == {"": round(3.10 + 3.10, 2)}
    assert report.device_tokens_per_rank == {"": 50790}
    assert report.host_gb_per_rank == {"": 13.31}


def test_prefixes_seen_in_the_wild_are_ranks() -> None:
    """`DP1 TP6 EP6`, `ATTN_CP2 TP2` and `PP1 TP0` each name one rank, as logged."""
    text = "".join(
        f"[2026-03-02 09:02:12 {prefix}] Init parallel begin.\n"
        for prefix in ("DP1 TP6 EP6", "ATTN_CP2 TP2", "PP1 TP0")
    )
    seen = [e.rank for e in parse_all(text) if isinstance(e, RankSeen)]
    assert seen == ["DP1 TP6 EP6", "ATTN_CP2 TP2", "PP1 TP0"]


def test_a_label_before_kv_cache_is_kept() -> None:
    """0.5.23's `{label} KV Cache is allocated. ...` keeps the label and the figures."""
    line = "[2026-03-02 09:07:19 TP0] swa KV Cache is allocated. dtype: torch.bfloat16, " + (
        "#tokens: 120344, K size: 8.26 GB, V size: 8.26 GB\n"
    )
    pools = [(p.label, p.tokens, p.kv_gib) for p in parse_all(line) if isinstance(p, DevicePool)]
    assert pools == [("swa", 120344, 16.52)]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("draft_mtp_v0.5.9.log", "draft pool (beside the device pool, not counted in it)"),
        ("hybrid_swa_v0.5.23.log", "other 120,344 tokens, 16.52 GiB; target 150,430 tokens"),
        ("dsa_indexer_v0.5.23.log", "host DSA indexer GB per rank: 29.02 on each of 4 ranks"),
        ("single_rank_no_tokens_v0.4.log", "ranks: 1 (no rank prefix: a single-process server)"),
        (
            "hybrid_swa_pools_v0.5.23.log",
            "full-attention pool 32,997 tokens, sliding-window pool 26,397 tokens, 1.02 GiB",
        ),
    ],
)
def test_text_report_shows_the_new_figures(
    name: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kimi-ops startup-report` prints each pattern's figure in its text report."""
    assert main(["startup-report", str(LOGS / name)]) == 0
    assert expected in capsys.readouterr().out


def test_json_report_carries_draft_pool_extra_host_pools_and_totals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The JSON report has `draft_pool`, `pools`, `host_extra_gb_per_rank` and
    `host_total_gb_per_rank`."""
    assert main(["startup-report", "--json", str(LOGS / "dsa_indexer_v0.5.23.log")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["host_extra_gb_per_rank"]["PP1 TP0"] == {"DSA indexer": 29.02}
    assert data["host_total_gb_per_rank"]["PP1 TP0"] == round(126.61 + 29.02, 2)
    assert data["draft_pool"] is None
    assert data["pools"] == [
        {"kind": "target", "tokens": 1409000, "kv_gib": 52.51, "label": None},
    ]
