"""The SGLang log texts the parser recognises, quoted as SGLang writes them.

Two kinds of patterns live here: the chunk-level filter that skips the lines a serving SGLang
prints by the million (batch lines and access logs) without allocating anything, and the per-line
patterns that pull figures out of the few lines that remain.
"""

from __future__ import annotations

import re

# Longest line the parser looks at; a longer one is clipped (the same way however it is chunked)
# so that a log with no line breaks cannot grow the parser's buffer without bound.
MAX_LINE = 65536

# Line breaks: SGLang's own lines end in "\n", tqdm refreshes start with "\r".
EOL = re.compile(r"[\r\n]")

# The lines of a serving SGLang that say nothing about a start, matched at a line's start:
#   [2026-02-24 12:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 512, ...
#   [2026-02-24 12:00:01 TP0] Decode batch, #running-req: 80, #token: 150000, ...
# (0.5.x prints "batch," and earlier builds "batch.": both are skipped)
#   INFO:     127.0.0.1:45678 - "POST /generate HTTP/1.1" 200 OK
# (the access line also comes with SGLang's "[date] " in front). Any access line except
# /model_info, which is the warmup. An empty line is skipped too.
_SERVING = r'(?:Decode|Prefill) batch[.,]|INFO: +\S+ - "[A-Z]+ /(?!model_info)'
# Anything in brackets before it, as SGLang's "[2026-02-24 12:00:01 TP0] ".
_BRACKETS = r"\[[^\]\r\n]*\] "
# A container runtime's timestamp before all of it (RUNTIME_STAMP).
_STAMP = r"\d{4}-\d\d-\d\dT[\d:.]+\S* "
# "[stamp ][brackets ]serving", its optional parts written out as alternatives, the most common
# first. This is tried at every line of the log, and an optional group costs the regex engine a
# repeat frame each time: written as "(...)?(...)?(...)" it took 3,750 machine instructions a
# serving line, as alternatives 2,840 (counted with Valgrind, docs/benchmarks.md).
_SKIP = f"{_BRACKETS}(?:{_SERVING})|(?:{_SERVING})|{_STAMP}(?:{_BRACKETS})?(?:{_SERVING})"
# At the start of a piece of a line (between "\r" and "\n" separators).
SKIP_LINE = re.compile(_SKIP)
# A "\n" followed by a line worth reading; the line starts at the match's end. The pattern starts
# with a literal so the regex engine finds candidates at memchr speed (a character class such as
# [\r\n] is five times slower); "\r" (tqdm's refreshes, "\r\n" line ends) is split later, only
# inside the lines this lets through.
WORTH_READING = re.compile(r"\n(?!\n|" + _SKIP + r")")

# "[2026-02-24 11:18:37 TP3] " / "[2026-02-24 11:18:37 DP1 TP3] " / "[2026-02-24 11:18:37] ";
# some SGLang builds log the date without its year: "[01-28 04:18:10] ".
HEADER = re.compile(r"\[((?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d)((?: [A-Z][A-Z_]*\d+)*)\] ?")

# A container runtime's own timestamp before SGLang's line (docker logs --timestamps, kubectl
# logs --timestamps): "2026-09-23T08:10:52.751329980Z [2026-09-23 08:10:52 DP2 TP2] ...".
RUNTIME_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? ")

# The first line of a start, SGLang's arguments: a ServerArgs repr up to 0.5.9, the resolved
# dict in 0.5.23 (docs/sglang.md, Startup log):
#   server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', ...)
#   server_args={'model_path': '/models/tiny-llama', ...}
SERVER_ARGS = ("server_args=ServerArgs(", "server_args={")

# Weight progress, one tqdm bar per loader (docs/sglang.md, Startup log):
#   Loading safetensors checkpoint shards:  27% Completed | 17/64 [00:11<00:29,  1.58it/s]
#   Multi-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]   (0.5.23's default)
#   Multi-thread loading pt checkpoint shards: ...   (0.5.23, .bin weights)
SHARDS = re.compile(
    r"(?:Loading safetensors checkpoint|Multi-thread loading(?: pt checkpoint)?) shards:"
    r"\s*\d+% Completed \| (\d+)/(\d+)"
)

# Capturing batches (bs=512 avail_mem=1.82 GB):  67%|██████▋   | 35/52 [00:09<00:04,  3.78it/s]
GRAPHS = re.compile(r"Capturing batches[^|]*\|[^|]*\| *(\d+)/(\d+)")

# KV Cache is allocated. #tokens: 231120, KV size: 15.13 GB
# KV Cache is allocated. #tokens: 231120, K size: 7.50 GB, V size: 7.50 GB
# KV Cache is allocated. dtype: torch.bfloat16, #tokens: 159274, KV size: 10.42 GB   (0.5.23)
# KV Cache is allocated. K size: 3.10 GB, V size: 3.10 GB.   (older builds: no #tokens)
# 0.5.23 may put a label before "KV Cache" (group 1); searched, not matched, from the message.
DEVICE_POOL = re.compile(
    r"(?:^|(\S+) )KV Cache is allocated\. (?:dtype: ([^,]+), )?(?:#tokens: (\d+), )?"
    r"(?:KV size: ([\d.]+) GB|K size: ([\d.]+) GB, V size: ([\d.]+) GB)"
)

# Allocating 48.00 GB host memory for hierarchical KV cache.
HOST_POOL_OLD = re.compile(r"Allocating ([\d.]+) GB host memory for hierarchical KV cache")
# Allocating kv hierarchical KV host pool: 683061 tokens, 48.00 GB host memory.   (0.5.23)
HOST_POOL_NEW = re.compile(
    r"Allocating (\S+) hierarchical KV host pool: (\d+) tokens, ([\d.]+) GB host memory"
)
# Any other host allocation, named after "for" up to " (", "," or the final ".":
# Allocating 29.02 GB host memory for DSA indexer (layout=page_first).
# Allocating 29.02 GB host memory for DSA indexer (layout=page_first), packed MTP layers: ...
HOST_EXTRA = re.compile(r"Allocating ([\d.]+) GB host memory for ([^(,]+?) ?(?:\(|,|\.?$)")

# A hybrid sliding-window model's two device pools of a rank (0.5.23,
# model_executor/pool_configurator.py; all SWA layers: no full pool, no full count):
# Use sliding window memory pool. full_layer_tokens=32997, swa_layer_tokens=26397
# Use sliding window memory pool (all SWA). swa_layer_tokens=26397
SWA_SPLIT = re.compile(
    r"Use sliding window memory pool(?: \(all SWA\))?\. (?:full_layer_tokens=(\d+), )?"
    r"swa_layer_tokens=(\d+)"
)
# Both of them once built (mem_cache/swa_memory_pool.py; GB is GiB, K and V of both pools):
# SWAKVPool mem usage: 5.14 GB, swa size: 26397, full size: 32997
# SWAKVPool VA upper bound: 5.14 GB, swa size: 26397, full size: 32997   (post-capture sizing)
SWA_POOL = re.compile(
    r"SWAKVPool (mem usage|VA upper bound): ([\d.]+) GB, swa size: (\d+), full size: (\d+)"
)
# HiCache memory headroom: host 123.4 GiB, cgroup 56.7 GiB
# (0.5.23, logged when the process is in a memory cgroup, before it sizes the host pools: host
# MemAvailable and the cgroup's headroom)
HEADROOM = re.compile(r"HiCache memory headroom: host ([\d.]+) GiB, cgroup ([\d.]+) GiB")

# max_total_num_tokens=231120, chunked_prefill_size=8192, max_prefill_tokens=16384, ...
MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")

# Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), ...
DIED = re.compile(r"Rank (\d+) scheduler died during initialization \(exit code: (-?\d+)\)")
# Rank 0 scheduler is dead. Please check if there are relevant logs.   (then "Exit code: -9")
DEAD = re.compile(r"Rank (\d+) scheduler is dead\.")
# 0.5.9, after "Rank 0 scheduler is dead. Please check if there are relevant logs.":
# Exit code: -9
EXIT_CODE = re.compile(r"^Exit code: (-?\d+)")

# The last line of a Python traceback: "ValueError: Not enough host memory available. ..."
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")

# Exit statuses of a process killed by SIGKILL, which is what the OOM killer sends.
SIGKILL_CODES = frozenset({"-9", "137"})
