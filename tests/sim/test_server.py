"""A full simulated start as a real subprocess: every log line in order, and the HTTP front."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Callable

import pytest

from tests.sim.conftest import Sim, free_port

READY = "The server is fired up and ready to roll!"
# small-2gpu: device pool 200,000 tokens at the default fraction 0.85, 35,136 B/token (MLA).
DEVICE_TOKENS = 200000
PER_TOKEN = 35136
KV_GIB = f"{DEVICE_TOKENS * PER_TOKEN / 1024**3:.2f}"  # 6.54
HOST_TOKENS = DEVICE_TOKENS * 2 + 1  # ratio 2, plus one page of 1 token
HOST_GB = f"{HOST_TOKENS * PER_TOKEN / 1e9:.2f}"  # 14.05

OLD = [
    (
        "",
        r"server_args=ServerArgs\(model_path='/models/kimi', .*tp_size=2, .*hicache_ratio=2\.0.*\)",
    ),
    ("TP", r"Init torch distributed begin\."),
    ("TP", r"Init torch distributed ends\. elapsed=\d+\.\d\d s, mem usage=0\.30 GB"),
    ("TP", r"Load weight begin\. avail mem=23\.20 GB"),
    (
        "TP",
        r"Load weight end\. elapsed=\d+\.\d\d s, type=DeepseekV3ForCausalLM, "
        r"dtype=torch\.bfloat16, avail mem=12\.20 GB, mem usage=11\.00 GB\.",
    ),
    ("TP0", r"Using KV cache dtype: torch\.bfloat16"),
    ("TP", rf"KV Cache is allocated\. #tokens: {DEVICE_TOKENS}, KV size: {KV_GIB} GB"),
    ("TP", r"Memory pool end\. avail mem=\d+\.\d\d GB"),
    (
        "TP",
        r"Capture cuda graph begin\. This can take up to several minutes\. avail mem=\d+\.\d\d GB",
    ),
    (
        "TP",
        r"Capture cuda graph end\. Time elapsed: \d+\.\d\d s\. mem usage=0\.40 GB\. "
        r"avail mem=\d+\.\d\d GB\.",
    ),
    (
        "TP0",
        rf"max_total_num_tokens={DEVICE_TOKENS}, chunked_prefill_size=4096, "
        r"max_prefill_tokens=16384, max_running_requests=256, context_len=32768, "
        r"available_gpu_mem=\d+\.\d\d GB",
    ),
    ("TP", rf"Allocating {HOST_GB} GB host memory for hierarchical KV cache\."),
]
NEW = [
    # 0.5.23 prints its resolved arguments as a dict (docs/sglang.md, Startup log).
    (
        "",
        r"server_args=\{'model_path': '/models/kimi', .*'tp_size': 2, .*'hicache_ratio': 2\.0.*\}",
    ),
    ("TP", r"Init parallel begin\."),
    ("TP", r"Init parallel ends\. elapsed=\d+\.\d\d s, mem usage=0\.30 GB"),
    OLD[3],
    (
        "TP",
        r"Load weight end\. elapsed=\d+\.\d\d s, type=DeepseekV3ForCausalLM, "
        r"avail mem=12\.20 GB, mem usage=11\.00 GB\.",
    ),
    OLD[5],
    (
        "TP",
        rf"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: {DEVICE_TOKENS}, "
        rf"KV size: {KV_GIB} GB",
    ),
    OLD[7],
    (
        "TP",
        r"Capture target decode CUDA graph begin\. backend=full, num_tokens_per_req=1, "
        r"bs=\[1, 2, 4, 8, 12, 16, 24, 32\], avail mem=\d+\.\d\d GB",
    ),
    (
        "TP",
        r"Capture target decode CUDA graph end\. elapsed=\d+\.\d\d s, mem usage=0\.40 GB, "
        r"avail mem=\d+\.\d\d GB\.",
    ),
    OLD[10],
    (
        "TP",
        rf"Allocating kv hierarchical KV host pool: {HOST_TOKENS} tokens, {HOST_GB} GB host "
        r"memory\.",
    ),
]
TAIL = [
    ("", r"INFO:     Started server process \[\d+\]"),
    ("", r"INFO:     Waiting for application startup\."),
    ("", r"INFO:     Application startup complete\."),
    ("", r"INFO:     Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)"),
    ("", r'INFO:     127\.0\.0\.1:\d+ - "GET /model_info HTTP/1\.1" 200 OK'),
    (
        "TP0",
        r"Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0\.00, "
        r"#running-req: 0, #queue-req: 0, .*input throughput \(token/s\): \d+\.\d\d",
    ),
    ("", r'INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK'),
    ("", re.escape(READY)),
]
ARGS = [
    "--model-path",
    "/models/kimi",
    "--tp",
    "2",
    "--host",
    "127.0.0.1",
    "--enable-hierarchical-cache",
    "--hicache-ratio",
    "2",
]


def expand(expected: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Per-rank lines ("TP") appear once for each of the two ranks, in any order."""
    out: list[tuple[str, str]] = []
    for who, pattern in expected:
        out += [("TP?", pattern)] * 2 if who == "TP" else [(who, pattern)]
    return out


def check_sequence(sim: Sim, expected: list[tuple[str, str]]) -> None:
    messages = sim.messages()
    wanted = expand(expected)
    assert len(messages) == len(wanted), "\n".join(m for _, m in messages)
    ranks_seen: dict[str, set[str]] = {}
    for (prefix, message), (who, pattern) in zip(messages, wanted, strict=True):
        assert re.fullmatch(pattern, message), (message, pattern)
        if who == "TP?":
            assert prefix in ("TP0", "TP1"), message
            ranks_seen.setdefault(pattern, set()).add(prefix)
        else:
            assert prefix == who, message
    assert all(seen == {"TP0", "TP1"} for seen in ranks_seen.values())


@pytest.mark.slow
@pytest.mark.parametrize(("version", "expected"), [("0.5.9", OLD), ("0.5.23", NEW)])
def test_full_start_prints_every_line_in_order(
    run_sim: Callable[..., Sim],
    sim_env: dict[str, str],
    version: str,
    expected: list[tuple[str, str]],
) -> None:
    """Both dialects print the lines of docs/sglang.md, Startup log, in order, each rank once."""
    sim = run_sim([*ARGS, "--port", "0"], dict(sim_env, KIMI_SIM_VERSION=version))
    sim.wait_for(READY)
    check_sequence(sim, expected + TAIL)
    assert sim.terminate() == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("version", "desc", "newline"),
    [
        ("0.5.9", "Loading safetensors checkpoint shards", True),
        # 0.5.23 loads with several threads by default, as a real 0.5.23 logged it:
        # "Multi-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]"
        ("0.5.23", "Multi-thread loading shards", False),
    ],
)
def test_weight_bar_goes_to_stderr_in_each_dialect(
    run_sim: Callable[..., Sim], sim_env: dict[str, str], version: str, desc: str, newline: bool
) -> None:
    """tqdm refreshes go to stderr with \\r under each dialect's name; 0.5.9 ends each with
    \\n, 0.5.23 does not."""
    sim = run_sim([*ARGS, "--port", "0"], dict(sim_env, KIMI_SIM_VERSION=version))
    sim.wait_for(READY)
    err = sim.stderr()
    refreshes = [
        f"{desc}: {p:3d}% Completed | {n}/4 "
        for n, p in ((0, 0), (1, 25), (2, 50), (3, 75), (4, 100))
    ]
    for text in refreshes:
        assert f"\r{text}" in err
    assert (f"]\n\r{desc}" in err) is newline
    assert "Capturing batches (bs=32 avail_mem=" in err
    assert " shards:" not in sim.stdout()


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


@pytest.mark.slow
def test_http_refused_then_503_then_200(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """The port is closed before uvicorn's lines, /health is 503 until warmup, then 200, empty."""
    port = free_port()
    env = dict(sim_env, KIMI_SIM_FAIL="stall:load_weights")
    sim = run_sim([*ARGS, "--port", str(port)], env)
    sim.wait_for("Load weight end.")
    with pytest.raises(ConnectionRefusedError):
        get(port, "/health")
    sim.terminate()

    env = dict(sim_env, KIMI_SIM_FAIL="stall:http")
    sim = run_sim([*ARGS, "--port", str(port)], env)
    sim.wait_for("Uvicorn running on")
    assert get(port, "/health") == (503, b"")
    sim.terminate()

    sim = run_sim([*ARGS, "--port", str(port)], sim_env)
    sim.wait_for(READY)
    assert get(port, "/health") == (200, b"")
    assert get(port, "/ready")[0] == 404  # 0.5.9 has no /ready
    sim.wait_for('"GET /health HTTP/1.1" 200 OK')
    assert sim.terminate() == 0


@pytest.mark.slow
def test_server_info_reports_the_running_config(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """/server_info has ServerArgs flat, the device pool, internal states and the version."""
    args = [
        "--model-path",
        "/models/kimi",
        "--tp-size",
        "2",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--enable-hicache",
        "--hicache-size",
        "20",
        "--mem-fraction-static",
        "0.7",
        "--hicache-write-policy",
        "write_back",
        "--page-size",
        "64",
        "--trust-remote-code",
    ]
    sim = run_sim(args, dict(sim_env, KIMI_SIM_VERSION="0.5.23"))
    sim.wait_for(READY)
    status, body = get(sim.port(), "/server_info")
    info = json.loads(body)
    assert status == 200
    assert info["enable_hierarchical_cache"] is True
    assert info["hicache_size"] == 20
    assert info["hicache_ratio"] == 2.0  # reported at its default: the size wins
    assert info["hicache_write_policy"] == "write_back"
    assert info["hicache_io_backend"] == "kernel"
    assert info["hicache_mem_layout"] == "page_first"
    assert (info["tp_size"], info["dp_size"], info["pp_size"]) == (2, 1, 1)
    assert info["mem_fraction_static"] == 0.7
    assert info["page_size"] == 64
    assert info["model_path"] == "/models/kimi"
    assert info["max_total_num_tokens"] == 150000  # the profile's pool at 0.7
    usage = info["internal_states"][0]["memory_usage"]
    assert usage["token_capacity"] == 150000
    assert usage["kvcache"] == round(150000 * PER_TOKEN / 1024**3, 2)
    assert info["version"] == "0.5.23"
    assert get(sim.port(), "/ready")[0] == 200
    host_tokens = (int(20e9 // PER_TOKEN) // 64 + 1) * 64
    assert (
        f"host pool: {host_tokens} tokens, {host_tokens * PER_TOKEN / 1e9:.2f} GB" in sim.stdout()
    )


@pytest.mark.slow
def test_get_server_info_logs_its_deprecation(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """/get_server_info answers like /server_info and logs SGLang's deprecation warning."""
    sim = run_sim([*ARGS, "--port", "0"], sim_env)
    sim.wait_for(READY)
    status, body = get(sim.port(), "/get_server_info")
    assert status == 200
    assert json.loads(body)["hicache_ratio"] == 2.0
    sim.wait_for(
        "Endpoint '/get_server_info' is deprecated and will be removed in a future "
        "version. Please use '/server_info' instead."
    )


@pytest.mark.slow
def test_metrics_and_synthetic_load(run_sim: Callable[..., Sim], sim_env: dict[str, str]) -> None:
    """With --enable-metrics and KIMI_SIM_LOAD the gauges move and batch lines are printed."""
    env = dict(sim_env, KIMI_SIM_VERSION="0.5.23", KIMI_SIM_LOAD="20")
    sim = run_sim([*ARGS, "--port", "0", "--enable-metrics"], env)
    sim.wait_for(READY)
    sim.wait_for("Decode batch, #running-req: ")
    status, body = get(sim.port(), "/metrics")
    text = body.decode()
    assert status == 200
    for name in ("token_usage", "num_running_reqs", "num_queue_reqs", "cache_hit_rate"):
        assert f"sglang:{name}{{" in text
    assert (
        f'sglang:hicache_host_total_tokens{{model_name="/models/kimi"}} {float(HOST_TOKENS)}'
        in text
    )
    running = re.search(r"sglang:num_running_reqs\{[^}]*\} (\S+)", text)
    assert running
    assert float(running.group(1)) > 0
    assert re.search(
        r"\[\S+ \S+ TP0\] Decode batch, #running-req: \d+, #token: \d+, token usage: "
        r"\d\.\d\d, cuda graph: True, gen throughput \(token/s\): \d+\.\d\d, "
        r"#queue-req: \d+",
        sim.stdout(),
    )


@pytest.mark.slow
def test_dp_and_pp_ranks_carry_their_prefixes(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """DP 2 x PP 2 x TP 2 on 8 GPUs: prefixes like `DP1 PP0 TP1`, one set of lines per rank."""
    env = dict(sim_env, KIMI_SIM_PROFILE="kimi-k25-8gpu", KIMI_SIM_TIME_SCALE="0.002")
    args = ["--model-path", "/m", "--tp", "2", "--dp-size", "2", "--pp-size", "2", "--port", "0"]
    sim = run_sim(args, env)
    sim.wait_for(READY)
    prefixes = [p for p, m in sim.messages() if m.startswith("Load weight begin.")]
    expected = [f"DP{d} PP{p} TP{t}" for d in (0, 1) for p in (0, 1) for t in (0, 1)]
    assert sorted(prefixes) == expected
    _status, body = get(sim.port(), "/server_info")
    assert len(json.loads(body)["internal_states"]) == 2
