"""Reports rebuilt from each fixture log: every phase and every figure."""

from __future__ import annotations

from datetime import datetime

import pytest

from bot.startup import Dialect, FailureKind, Phase, build_report
from tests.startup.conftest import BYTES_PER_TOKEN, DEVICE_TOKENS, TP8, parse_all, read_log


def _kv_gib(tokens: int) -> float:
    # SGLang's device line: GB = 1024**3 bytes (docs/sglang.md, Host pool sizing).
    return round(tokens * BYTES_PER_TOKEN / 1024**3, 2)


def _host_tokens_for_ratio(ratio: int) -> int:
    # tokens = int(device_tokens * ratio); pages = tokens // page_size + 1 (page size 1).
    return DEVICE_TOKENS * ratio + 1


def _host_tokens_for_size(gb: int) -> int:
    return int(gb * 1e9 // BYTES_PER_TOKEN) + 1


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_ready_0_5_9_ratio_4_timeline() -> None:
    """The 0.5.9 ratio-4 start: eight phases in order with their log times, ready at the end."""
    report = build_report(parse_all(read_log("ready_ratio4_v0.5.9.log")))
    assert report.dialect is Dialect.V0_5_9
    assert [(s.phase, s.start) for s in report.phases] == [
        (Phase.INIT, _at("2026-02-24 11:18:30")),
        (Phase.LOAD_WEIGHTS, _at("2026-02-24 11:18:41")),
        (Phase.KV_POOL, _at("2026-02-24 11:23:41")),
        (Phase.CUDA_GRAPH, _at("2026-02-24 11:23:45")),
        (Phase.HOST_POOL, _at("2026-02-24 11:24:01")),
        # 0.5.9's uvicorn lines carry no date: when HTTP and warmup began is unknown (the
        # silent pin is somewhere in host_pool .. ready), not the host pool line's time.
        (Phase.HTTP, None),
        (Phase.WARMUP, None),
        (Phase.READY, _at("2026-02-24 11:26:38")),
    ]
    assert report.phases[4].seconds is None  # host_pool's end is unknown
    assert [s.end for s in report.phases[:-1]] == [s.start for s in report.phases[1:]]
    assert report.phases[1].seconds == 300.0
    assert report.ready is True
    assert report.ready_at == _at("2026-02-24 11:26:38")
    assert report.startup_seconds == (8 * 60 + 8)
    assert report.failure is None


def test_ready_0_5_9_ratio_4_figures() -> None:
    """Ratio 4 on 159,274 device tokens: 44.77 GB per rank on 8 ranks (field notes 004)."""
    report = build_report(parse_all(read_log("ready_ratio4_v0.5.9.log")))
    host_gb = round(_host_tokens_for_ratio(4) * BYTES_PER_TOKEN / 1e9, 2)
    assert host_gb == 44.77
    assert report.ranks == TP8
    assert report.device_tokens == DEVICE_TOKENS
    assert report.device_tokens_per_rank == dict.fromkeys(TP8, DEVICE_TOKENS)
    assert report.kv_gib_per_rank == dict.fromkeys(TP8, _kv_gib(DEVICE_TOKENS))
    assert report.host_gb_per_rank == dict.fromkeys(TP8, host_gb)
    assert report.host_gb_total == round(8 * host_gb, 2)
    assert report.host_tokens_per_rank == {}  # 0.5.9 does not log them
    assert report.shards == (64, 64)
    assert report.cuda_graphs == (52, 52)


def test_ready_0_5_23_size_48() -> None:
    """The 0.5.23 size-48 start: 683,061 host tokens and 48.00 GB per rank, ready."""
    report = build_report(parse_all(read_log("ready_size48_v0.5.23.log")))
    tokens = _host_tokens_for_size(48)
    assert tokens == 683061
    assert report.dialect is Dialect.V0_5_23
    assert [(s.phase, s.start) for s in report.phases] == [
        (Phase.INIT, _at("2026-03-02 09:02:05")),
        (Phase.LOAD_WEIGHTS, _at("2026-03-02 09:02:16")),
        # TP5's "Load weight end." is glued to tqdm's last refresh, before its line break.
        (Phase.KV_POOL, _at("2026-03-02 09:07:16")),
        (Phase.CUDA_GRAPH, _at("2026-03-02 09:07:20")),
        (Phase.HOST_POOL, _at("2026-03-02 09:07:36")),
        (Phase.HTTP, _at("2026-03-02 09:10:22")),
        (Phase.WARMUP, _at("2026-03-02 09:10:23")),
        (Phase.READY, _at("2026-03-02 09:10:25")),
    ]
    assert report.phases[4].seconds == 166.0  # the silent pin
    assert report.ranks == TP8
    assert report.device_tokens == DEVICE_TOKENS
    assert report.kv_gib_per_rank == dict.fromkeys(TP8, 10.42)
    assert report.host_gb_per_rank == dict.fromkeys(TP8, round(tokens * BYTES_PER_TOKEN / 1e9, 2))
    assert report.host_tokens_per_rank == dict.fromkeys(TP8, tokens)
    assert report.shards == (64, 64)
    assert report.ready_at == _at("2026-03-02 09:10:25")
    assert report.failure is None


def test_host_memory_refusal_0_5_23() -> None:
    """A refused host pool: host_memory, with the exception, the ValueError and the sigquit."""
    report = build_report(parse_all(read_log("host_memory_v0.5.23.log")))
    assert report.ready is False
    assert report.failure is not None
    assert report.failure.kind is FailureKind.HOST_MEMORY
    assert report.failure.lines == (
        "[2026-03-02 10:45:43 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "ValueError: Not enough host memory available. Requesting 48.00 GB but only have 41.23 GB"
        " free. Please reduce the size of the hierarchical cache.",
        "[2026-03-02 10:45:43] Received sigquit from a child process. It usually means the child"
        " failed.",
    )
    assert report.phases[-1].phase is Phase.CUDA_GRAPH
    assert report.phases[-1].end == _at("2026-03-02 10:45:43")
    assert report.host_gb_per_rank == {}


def test_oom_killed_rank_0_5_23() -> None:
    """Rank 3 killed with -9 while pinning: oom_killed, with TP3's pool line and the died line."""
    report = build_report(parse_all(read_log("oom_killed_v0.5.23.log")))
    assert report.failure is not None
    assert report.failure.kind is FailureKind.OOM_KILLED
    assert report.failure.lines == (
        "[2026-03-03 14:10:31 TP3] Allocating kv hierarchical KV host pool: 683061 tokens,"
        " 48.00 GB host memory.",
        "[2026-03-03 14:11:42] Rank 3 scheduler died during initialization (exit code: -9)."
        " If exit code is -9 (SIGKILL), a common cause is the OS OOM killer.",
    )
    assert report.host_gb_per_rank == dict.fromkeys(TP8, 48.0)
    assert report.phases[-1].phase is Phase.HOST_POOL
    assert report.phases[-1].seconds == 71.0


def test_hicache_300_on_0_5_9_goes_silent() -> None:
    """8 x 300 GB on 0.5.9: every rank logs its pool, then nothing: not ready, no failure named."""
    report = build_report(parse_all(read_log("hicache300_hang_v0.5.9.log")))
    assert report.host_gb_per_rank == dict.fromkeys(TP8, 300.0)
    assert report.host_gb_total == 2400.0
    assert report.device_tokens == 116171
    assert report.ready is False
    assert report.failure is None
    assert report.phases[-1].phase is Phase.HOST_POOL
    assert report.phases[-1].end is None


def test_unbalanced_gpu_memory_0_5_9() -> None:
    """Leftover GPU memory: gpu_busy, failing during init, with the decisive lines."""
    report = build_report(parse_all(read_log("gpu_busy_v0.5.9.log")))
    assert report.failure is not None
    assert report.failure.kind is FailureKind.GPU_BUSY
    assert any("The memory capacity is unbalanced." in line for line in report.failure.lines)
    assert report.failure.lines[-1].endswith(
        "Received sigquit from a child process. It usually means the child failed."
    )
    assert [s.phase for s in report.phases] == [Phase.INIT]
    assert report.ranks == TP8


def test_report_is_about_the_last_start_of_the_log() -> None:
    """A log holding a failed start then a ready one reports the ready one only."""
    text = read_log("host_memory_v0.5.23.log") + read_log("ready_size48_v0.5.23.log")
    report = build_report(parse_all(text))
    assert report.failure is None
    assert report.ready is True
    assert report.phases[0].start == _at("2026-03-02 09:02:05")


def test_a_start_that_failed_in_init_is_not_merged_with_the_next() -> None:
    """The leftover-GPU failure comes during init; the start after it in the same log (the
    process backend appends every run) is reported alone: ready, 8:08, no failure."""
    text = read_log("gpu_busy_v0.5.9.log") + read_log("ready_ratio4_v0.5.9.log")
    report = build_report(parse_all(text))
    assert report.failure is None
    assert report.ready is True
    assert report.phases[0].start == _at("2026-02-24 11:18:30")
    assert report.startup_seconds == 8 * 60 + 8


def test_a_start_that_failed_before_any_rank_is_not_merged_with_the_next() -> None:
    """A start refused before its ranks began (HiCache with --disable-radix-cache raises in the
    main process) does not lend its failure to the start logged after it."""
    refused = (
        "[2026-02-24 11:10:00] server_args=ServerArgs(model_path='m', disable_radix_cache=True)\n"
        "Traceback (most recent call last):\n"
        "ValueError: The hierarchical cache cannot be used together with disable_radix_cache.\n"
        "[2026-02-24 11:10:01] Received sigquit from a child process. It usually means the child "
        "failed.\n"
    )
    report = build_report(parse_all(refused + read_log("ready_ratio4_v0.5.9.log")))
    assert report.failure is None
    assert report.ready is True


@pytest.mark.parametrize(
    "name",
    ["ready_ratio4_v0.5.9.log", "host_memory_v0.5.23.log", "oom_killed_v0.5.23.log"],
)
def test_to_dict_has_the_documented_keys(name: str) -> None:
    """The JSON form holds phases, figures per rank, ranks, readiness and failure."""
    data = build_report(parse_all(read_log(name))).to_dict()
    for key in (
        "phases",
        "device_tokens",
        "kv_gib_per_rank",
        "host_gb_per_rank",
        "host_tokens_per_rank",
        "ranks",
        "ready",
        "ready_at",
        "failure",
    ):
        assert key in data
    assert set(data["phases"][0]) >= {"name", "start", "end"}


def test_the_report_keeps_sglangs_headroom_beside_the_host_pools() -> None:
    """The first rank's headroom line is kept in the report and its JSON, beside the host pool
    the start allocated after it."""
    text = (
        "[2026-11-30 10:00:02 TP0] HiCache memory headroom: host 123.4 GiB, cgroup 13.0 GiB\n"
        "[2026-11-30 10:00:02 TP1] HiCache memory headroom: host 120.0 GiB, cgroup 12.9 GiB\n"
        "[2026-11-30 10:00:03 TP0] Allocating kv hierarchical KV host pool: 56923 tokens, "
        "2.00 GB host memory.\n"
    )
    report = build_report(parse_all(text))
    assert report.sglang_headroom is not None
    assert (report.sglang_headroom.host_gib, report.sglang_headroom.cgroup_gib) == (123.4, 13.0)
    assert report.to_dict()["sglang_headroom"] == {
        "host_gib": 123.4,
        "cgroup_gib": 13.0,
        "headroom_gib": 13.0,
    }
    assert build_report(parse_all(text.splitlines(keepends=True)[2])).sglang_headroom is None
