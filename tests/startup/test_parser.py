"""The incremental parser: line forms of both SGLang eras, chunking, and what it skips."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.startup import (
    DevicePool,
    Dialect,
    DialectDetected,
    GraphProgress,
    HostPool,
    MaxTotalTokens,
    MemoryHeadroom,
    Phase,
    PhaseStarted,
    RankSeen,
    ShardProgress,
    SlidingWindowPool,
    SlidingWindowSplit,
    StartupParser,
)
from tests._examples import examples
from tests.startup.conftest import parse_all, read_log

FIXTURES = (
    "ready_ratio4_v0.5.9.log",
    "ready_size48_v0.5.23.log",
    "host_memory_v0.5.23.log",
    "oom_killed_v0.5.23.log",
    "hicache300_hang_v0.5.9.log",
    "gpu_busy_v0.5.9.log",
)
# Logs of deployments as they are run: draft pools, hybrid pools, extra host pools, old lines.
DEPLOYMENT_FIXTURES = (
    "draft_mtp_v0.5.9.log",
    "hybrid_swa_v0.5.23.log",
    "hybrid_swa_pools_v0.5.23.log",
    "dsa_indexer_v0.5.23.log",
    "single_rank_no_tokens_v0.4.log",
    # A real SGLang 0.5.23 start on CPU (make test-real), as it logged it, teardown included.
    "cpu_tiny_llama_v0.5.23.log",
)
# One text holding every fixture, with "\r\n" line ends in one of them.
ALL_TEXT = (
    "".join(read_log(name) for name in FIXTURES[:3])
    + read_log(FIXTURES[3]).replace("\n", "\r\n")
    + "".join(read_log(name) for name in DEPLOYMENT_FIXTURES)
)


def _chunked(text: str, cuts: list[int]) -> list[object]:
    parser = StartupParser()
    events: list[object] = []
    previous = 0
    for cut in [*sorted(cuts), len(text)]:
        events.extend(parser.feed(text[previous:cut]))
        previous = cut
    events.extend(parser.close())
    return events


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_any_chunking_gives_the_events_of_one_chunk(data: st.DataObject) -> None:
    """Random split points (mid-line, between \\r and \\n) give exactly the one-chunk events."""
    text = ALL_TEXT
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=40))
    assert _chunked(text, cuts) == parse_all(text)


@settings(max_examples=examples(30), deadline=None)
@given(cuts=st.lists(st.integers(0, 2000), max_size=30))
def test_chunking_near_tqdm_refreshes_changes_nothing(cuts: list[int]) -> None:
    """Splits inside 0.5.23's \\r-only tqdm bar and its glued rank line change no event."""
    text = read_log("ready_size48_v0.5.23.log")
    start = text.index("\rLoading safetensors")
    window = [start + cut for cut in cuts]
    assert _chunked(text, window) == parse_all(text)


def test_character_by_character_feeding_matches_one_chunk() -> None:
    """Feeding a whole 0.5.9 start one character at a time loses and duplicates nothing."""
    text = read_log("ready_ratio4_v0.5.9.log")
    parser = StartupParser()
    events = [event for char in text for event in parser.feed(char)] + parser.close()
    assert events == parse_all(text)


def test_rank_prefixes_of_every_form_are_read() -> None:
    """` TP3`, ` DP1 TP3`, ` PP0`, ` EP2` and no prefix all give the rank as logged."""
    text = (
        "[2026-03-02 09:02:12 TP3] Init parallel begin.\n"
        "[2026-03-02 09:02:12 DP1 TP3] Init parallel begin.\n"
        "[2026-03-02 09:02:12 PP0] Init parallel begin.\n"
        "[2026-03-02 09:02:12 EP2] Init parallel begin.\n"
        "[2026-03-02 09:02:12] Init parallel begin.\n"
    )
    ranks = [e.rank for e in parse_all(text) if isinstance(e, RankSeen)]
    assert ranks == ["TP3", "DP1 TP3", "PP0", "EP2"]


def test_phases_move_forward_only_and_once() -> None:
    """A late rank's earlier milestone does not move the phase back or repeat it."""
    text = (
        "[2026-02-24 11:18:37 TP0] Init torch distributed begin.\n"
        "[2026-02-24 11:18:41 TP0] Load weight begin. avail mem=94.51 GB\n"
        "[2026-02-24 11:18:42 TP7] Init torch distributed begin.\n"
        "[2026-02-24 11:18:43 TP7] Load weight begin. avail mem=94.51 GB\n"
    )
    phases = [(e.phase, e.at) for e in parse_all(text) if isinstance(e, PhaseStarted)]
    assert phases == [
        (Phase.INIT, datetime(2026, 2, 24, 11, 18, 37)),
        (Phase.LOAD_WEIGHTS, datetime(2026, 2, 24, 11, 18, 41)),
    ]


def test_untimestamped_lines_take_the_last_timestamp_seen() -> None:
    """A uvicorn line without `[date]` is dated by the line before and marked unstamped; one with
    it by its own."""
    text = (
        "[2026-02-24 11:24:01 TP0] Allocating 44.77 GB host memory for hierarchical KV cache.\n"
        "INFO:     Started server process [12345]\n"
        "INFO:     Application startup complete.\n"
        '[2026-02-24 11:26:36] INFO:     127.0.0.1:40312 - "GET /model_info HTTP/1.1" 200 OK\n'
    )
    phases = {e.phase: e for e in parse_all(text) if isinstance(e, PhaseStarted)}
    assert phases[Phase.HTTP].at == datetime(2026, 2, 24, 11, 24, 1)
    assert phases[Phase.HTTP].stamped is False  # a bound, not when HTTP came up
    assert phases[Phase.WARMUP].at == datetime(2026, 2, 24, 11, 26, 36)
    assert phases[Phase.WARMUP].stamped is True


def test_uvicorn_running_line_alone_means_http_up() -> None:
    """`Uvicorn running on ...` is enough to say the port is open."""
    text = "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n"
    assert [e.phase for e in parse_all(text) if isinstance(e, PhaseStarted)] == [Phase.HTTP]


def test_device_pool_lines_of_mla_mha_and_0_5_23() -> None:
    """MLA `KV size`, MHA `K size`+`V size` and 0.5.23's `dtype:` form all give tokens and GiB."""
    text = (
        "[2026-02-24 11:23:44 TP0] KV Cache is allocated. #tokens: 231120, KV size: 15.13 GB\n"
        "[2026-02-24 11:23:44 TP1] KV Cache is allocated. #tokens: 231120, "
        "K size: 7.50 GB, V size: 7.50 GB\n"
        "[2026-02-24 11:23:44 TP2] KV Cache is allocated. dtype: torch.bfloat16, "
        "#tokens: 159274, KV size: 10.42 GB\n"
    )
    pools = [e for e in parse_all(text) if isinstance(e, DevicePool)]
    assert [(p.rank, p.tokens, p.kv_gib, p.dtype) for p in pools] == [
        ("TP0", 231120, 15.13, None),
        ("TP1", 231120, 15.0, None),
        ("TP2", 159274, 10.42, "torch.bfloat16"),
    ]
    assert (pools[1].k_gib, pools[1].v_gib) == (7.5, 7.5)


def test_device_pool_line_of_an_mha_model_in_0_5_23() -> None:
    """0.5.23's MHA form (a real CPU start's line) gives its dtype, tokens, and K and V apart."""
    line = (
        "[2026-11-30 09:17:51] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 16384, "
        "K size: 0.00 GB, V size: 0.00 GB\n"
    )
    pools = [e for e in parse_all(line) if isinstance(e, DevicePool)]
    assert [(p.rank, p.tokens, p.k_gib, p.v_gib, p.dtype) for p in pools] == [
        (None, 16384, 0.0, 0.0, "torch.bfloat16")
    ]


def test_host_pool_lines_of_both_eras() -> None:
    """0.5.9 logs GB only; 0.5.23 logs tokens and GB (1e9 bytes), as written."""
    text = (
        "[2026-02-24 11:24:01 TP0] Allocating 44.77 GB host memory for hierarchical KV cache.\n"
        "[2026-03-02 09:07:36 TP1] Allocating kv hierarchical KV host pool: 683061 tokens, "
        "48.00 GB host memory.\n"
    )
    pools = [(e.rank, e.gb, e.tokens, e.pool) for e in parse_all(text) if isinstance(e, HostPool)]
    assert pools == [("TP0", 44.77, None, "kv"), ("TP1", 48.0, 683061, "kv")]


def test_first_lines_of_both_eras_begin_a_start_at_init() -> None:
    """0.5.9's `server_args=ServerArgs(` and 0.5.23's `server_args={` (a real 0.5.23 line's
    opening) each start the init phase at their own time."""
    for line in (
        "[2026-02-24 11:18:30] server_args=ServerArgs(model_path='m', tp_size=8)\n",
        "[2026-11-30 09:15:38] server_args={'model_path': "
        "'/root/.cache/kimi-realsgl/models/tiny-llama', 'tokenizer_path': "
        "'/root/.cache/kimi-realsgl/models/tiny-llama', 'tokenizer_mode': 'auto'}\n",
    ):
        phases = [(e.phase, e.at) for e in parse_all(line) if isinstance(e, PhaseStarted)]
        stamp = datetime.fromisoformat(line[1:20])
        assert phases == [(Phase.INIT, stamp)], line


def test_a_dict_server_args_line_starts_a_new_start_too() -> None:
    """After a 0.5.9 start got past init, 0.5.23's `server_args={` begins the next at init."""
    text = (
        "[2026-02-24 11:18:30] server_args=ServerArgs(tp_size=8)\n"
        "[2026-02-24 11:18:41 TP0] Load weight begin. avail mem=94.51 GB\n"
        "[2026-02-24 11:40:00] server_args={'tp_size': 8}\n"
    )
    phases = [(e.phase, e.at) for e in parse_all(text) if isinstance(e, PhaseStarted)]
    assert [p for p, _ in phases] == [Phase.INIT, Phase.LOAD_WEIGHTS, Phase.INIT]
    assert phases[2][1] == datetime(2026, 2, 24, 11, 40, 0)


def test_weight_bars_of_every_loader_give_shard_progress() -> None:
    """The single-thread bar, 0.5.23's multi-thread bar (its two refreshes quoted from a real
    start, glued by tqdm's \\r) and the `.bin` multi-thread bar all report shards done."""
    text = (
        "\rLoading safetensors checkpoint shards:  27% Completed | 17/64 [00:11<00:29,  1.58it/s]"
        "\n\rMulti-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]"
        "\rMulti-thread loading shards: 100% Completed | 1/1 [00:00<00:00, 216.72it/s]"
        "\n\rMulti-thread loading pt checkpoint shards:  50% Completed | 2/4 "
        "[00:01<00:01,  2.00it/s]\n"
    )
    progress = [(e.done, e.total) for e in parse_all(text) if isinstance(e, ShardProgress)]
    assert progress == [(17, 64), (0, 1), (1, 1), (2, 4)]


def test_a_line_naming_shards_without_a_bar_is_no_progress() -> None:
    """A line that only mentions shards gives no shard progress and no phase."""
    events = parse_all("[2026-11-30 09:17:50] Multi-thread loading shards: skipped\n")
    assert not [e for e in events if isinstance(e, ShardProgress | PhaseStarted)]


def test_a_real_cpu_start_of_0_5_23_reads_from_its_first_line() -> None:
    """A real 0.5.23 start on CPU: init at its `server_args={` line (09:15:38, not at `Init
    parallel begin.` two minutes later), the multi-thread bar's shards, the MHA pool of
    `--max-total-tokens 16384` and no CUDA graph phase (torch_native attention)."""
    events = parse_all(read_log("cpu_tiny_llama_v0.5.23.log"))
    phases = [(e.phase, e.at) for e in events if isinstance(e, PhaseStarted)]
    assert phases[0] == (Phase.INIT, datetime(2026, 11, 30, 9, 15, 38))
    assert [p for p, _ in phases] == [
        Phase.INIT,
        Phase.LOAD_WEIGHTS,
        Phase.KV_POOL,
        Phase.HOST_POOL,
        Phase.HTTP,
        Phase.WARMUP,
        Phase.READY,
    ]
    shards = [(e.done, e.total) for e in events if isinstance(e, ShardProgress)]
    assert shards == [(0, 1), (1, 1)]
    pools = [(p.tokens, p.k_gib, p.v_gib, p.dtype) for p in events if isinstance(p, DevicePool)]
    assert pools == [(16384, 0.0, 0.0, "torch.bfloat16")]
    assert [e.tokens for e in events if isinstance(e, MaxTotalTokens)] == [16384]


def test_max_total_num_tokens_line() -> None:
    """Rank 0's `max_total_num_tokens=` line gives the device pool's tokens."""
    text = (
        "[2026-02-24 11:24:00 TP0] max_total_num_tokens=231120, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=4096, context_len=262144, "
        "available_gpu_mem=0.82 GB\n"
        # A real 0.5.23 start on CPU:
        "[2026-11-30 09:17:51] max_total_num_tokens=16384, chunked_prefill_size=4096, "
        "max_prefill_tokens=16384, max_running_requests=16, context_len=2048, "
        "available_cpu_mem=20.10 GB\n"
    )
    tokens = [e.tokens for e in parse_all(text) if isinstance(e, MaxTotalTokens)]
    assert tokens == [231120, 16384]


def test_tqdm_repaints_of_the_same_count_are_reported_once() -> None:
    """Each shard count of the 0.5.9 bar (repainted twice at 17 and 43) appears once, in order."""
    events = parse_all(read_log("ready_ratio4_v0.5.9.log"))
    shards = [(e.done, e.total) for e in events if isinstance(e, ShardProgress)]
    assert shards == [(n, 64) for n in range(65)]
    graphs = [(e.done, e.total) for e in events if isinstance(e, GraphProgress)]
    assert graphs == [(n, 52) for n in range(53)]


def test_dialect_is_told_by_the_init_line() -> None:
    """`Init parallel begin.` means the 0.5.23 era; `Init torch distributed begin.` 0.5.8/0.5.9."""
    new = parse_all("[2026-03-02 09:02:12 TP3] Init parallel begin.\n")
    old = parse_all("[2026-02-24 11:18:37 TP3] Init torch distributed begin.\n")
    assert [e.dialect for e in new if isinstance(e, DialectDetected)] == [Dialect.V0_5_23]
    assert [e.dialect for e in old if isinstance(e, DialectDetected)] == [Dialect.V0_5_9]


def test_batch_and_access_lines_give_no_event() -> None:
    """Per-request lines of a serving server (batches in 0.5.x's "batch," and older builds'
    "batch." wording, access logs, /health) are skipped."""
    text = (
        "[2026-02-24 12:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 512, "
        "#cached-token: 0, token usage: 0.65, #running-req: 79, #queue-req: 0, \n"
        "[2026-02-24 12:00:01 TP0] Decode batch, #running-req: 80, #token: 150000, "
        "token usage: 0.65, cuda graph: True, gen throughput (token/s): 1234.56, #queue-req: 0, \n"
        "[2026-02-24 12:00:01 TP0] Prefill batch. #new-seq: 1, #new-token: 512, "
        "#cached-token: 0, token usage: 0.65, #running-req: 79, #queue-req: 0, \n"
        "[2026-02-24 12:00:01 TP0] Decode batch. #running-req: 80, #token: 150000, "
        "token usage: 0.65, cuda graph: True, gen throughput (token/s): 1234.56, #queue-req: 0, \n"
        'INFO:     127.0.0.1:45678 - "POST /generate HTTP/1.1" 200 OK\n'
        '[2026-02-24 12:00:02] INFO:     127.0.0.1:45679 - "GET /health HTTP/1.1" 200 OK\n'
    ) * 50
    assert parse_all(text) == []


def test_close_reads_the_last_line_without_a_line_break() -> None:
    """A final line with no "\\n" is read by close(), not by feed()."""
    parser = StartupParser()
    assert parser.feed("[2026-02-24 11:26:38] The server is fired up and ready to roll!") == []
    events = parser.close()
    assert [e.phase for e in events if isinstance(e, PhaseStarted)] == [Phase.READY]


def test_a_new_server_args_line_starts_a_new_start() -> None:
    """After a start got past init, `server_args=ServerArgs(` begins the next one at init."""
    text = (
        "[2026-02-24 11:18:30] server_args=ServerArgs(tp_size=8)\n"
        "[2026-02-24 11:18:41 TP0] Load weight begin. avail mem=94.51 GB\n"
        "[2026-02-24 11:40:00] server_args=ServerArgs(tp_size=8)\n"
        "[2026-02-24 11:40:11 TP0] Load weight begin. avail mem=94.51 GB\n"
    )
    phases = [(e.phase, e.at) for e in parse_all(text) if isinstance(e, PhaseStarted)]
    assert [p for p, _ in phases] == [Phase.INIT, Phase.LOAD_WEIGHTS] * 2
    assert phases[2][1] == datetime(2026, 2, 24, 11, 40, 0)


def test_timestamps_without_a_year_take_the_last_year_seen() -> None:
    """`[01-28 04:18:10]` is read with the year of the last full timestamp."""
    text = (
        "[2026-01-28 04:10:00 TP0] Init parallel begin.\n"
        "[01-28 04:18:10 TP0] Load weight begin. avail mem=94.51 GB\n"
    )
    starts = [e.at for e in parse_all(text) if isinstance(e, PhaseStarted)]
    assert starts == [datetime(2026, 1, 28, 4, 10), datetime(2026, 1, 28, 4, 18, 10)]


def test_an_endless_line_is_clipped_the_same_however_it_is_fed() -> None:
    """A 2 MB line without breaks is read only up to its first 64 KiB, however it is fed."""
    marker = "[2026-02-24 11:26:38] The server is fired up and ready to roll!"
    early = marker + "x" * 2_000_000 + "\n"
    late = "x" * 100_000 + marker + "\n"
    for text, phases in ((early, [Phase.READY]), (late, [])):
        parser = StartupParser()
        events = []
        for i in range(0, len(text), 4096):
            events.extend(parser.feed(text[i : i + 4096]))
        events.extend(parser.close())
        assert [e.phase for e in events if isinstance(e, PhaseStarted)] == phases
        assert events == parse_all(text)


def test_sliding_window_lines_of_0_5_23() -> None:
    """The token split and SWAKVPool's size give one event each, with the rank and figures;
    the all-SWA form has no full pool, and a VA upper bound says so."""
    events = parse_all(
        "[2026-11-02 10:01:08 TP1] Use sliding window memory pool. full_layer_tokens=32997, "
        "swa_layer_tokens=26397\n"
        "[2026-11-02 10:01:08 TP1] SWAKVPool mem usage: 5.14 GB, swa size: 26397, "
        "full size: 32997\n"
        "[2026-11-02 10:01:09 TP0] Use sliding window memory pool (all SWA). "
        "swa_layer_tokens=4096\n"
        "[2026-11-02 10:01:09 TP0] SWAKVPool VA upper bound: 0.50 GB, swa size: 4096, "
        "full size: 0\n"
    )
    splits = [e for e in events if isinstance(e, SlidingWindowSplit)]
    usages = [e for e in events if isinstance(e, SlidingWindowPool)]
    assert [(e.rank, e.full_tokens, e.swa_tokens) for e in splits] == [
        ("TP1", 32997, 26397),
        ("TP0", 0, 4096),
    ]
    assert [(e.rank, e.kv_gib, e.swa_tokens, e.full_tokens, e.upper_bound) for e in usages] == [
        ("TP1", 5.14, 26397, 32997, False),
        ("TP0", 0.5, 4096, 0, True),
    ]
    assert any(isinstance(e, PhaseStarted) and e.phase is Phase.KV_POOL for e in events)


def test_a_line_naming_the_sliding_window_pool_without_figures_gives_no_pool_event() -> None:
    """A message that only mentions the pool (a warning, say) is not read as its figures."""
    events = parse_all(
        "[2026-11-02 10:01:08 TP0] Use sliding window memory pool. (sizes pending)\n"
        "[2026-11-02 10:01:08 TP0] SWAKVPool mem usage unknown\n"
    )
    assert not [e for e in events if isinstance(e, (SlidingWindowSplit, SlidingWindowPool))]


def test_sglangs_memory_headroom_line_is_an_event() -> None:
    """0.5.23's ``HiCache memory headroom: host 123.4 GiB, cgroup 56.7 GiB`` gives its two
    figures and the rank that logged it; SGLang plans with the smaller."""
    line = "[2026-11-30 10:00:02 TP0] HiCache memory headroom: host 123.4 GiB, cgroup 56.7 GiB\n"
    events = [e for e in parse_all(line) if isinstance(e, MemoryHeadroom)]
    assert len(events) == 1
    assert (events[0].rank, events[0].host_gib, events[0].cgroup_gib) == ("TP0", 123.4, 56.7)
    assert events[0].headroom_gib == 56.7
    assert events[0].line == line.rstrip("\n")
