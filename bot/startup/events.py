"""What the startup parser reports: phases, figures and failures of one SGLang start.

Every event is a frozen dataclass with ``at``: the timestamp of the log line it came from, or,
for lines that carry none (tqdm bars, uvicorn's ``INFO:     ...`` lines), the last timestamp seen
before it (``None`` when no timestamped line came first). ``rank`` is the line's rank prefix as
logged (``"TP3"``, ``"DP1 TP3"``, ``"PP0"``), or ``None`` for the main process and for servers
with a single rank, whose schedulers log no prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from bot.vocab import FailureKind

__all__ = [
    "HYBRID_FULL_HOST_POOL",
    "HYBRID_SWA_HOST_POOL",
    "KV_HOST_POOL",
    "DevicePool",
    "Dialect",
    "DialectDetected",
    "Event",
    "FailureKind",
    "FailureSeen",
    "GraphProgress",
    "HiCacheAutoSized",
    "HostPool",
    "MaxTotalTokens",
    "MemoryHeadroom",
    "Phase",
    "PhaseStarted",
    "PoolKind",
    "RankSeen",
    "ShardProgress",
    "SlidingWindowPool",
    "SlidingWindowSplit",
]


class Phase(StrEnum):
    """The phases of a start, in the order SGLang goes through them.

    Each value is also an :class:`~bot.vocab.EventPhase`, in the same order: the agent records
    a parsed phase as the event phase of the same value (``tests/startup/test_events.py``).
    """

    INIT = "init"
    LOAD_WEIGHTS = "load_weights"
    KV_POOL = "kv_pool"
    CUDA_GRAPH = "cuda_graph"
    HOST_POOL = "host_pool"
    HTTP = "http"
    WARMUP = "warmup"
    READY = "ready"


PHASE_ORDER: tuple[Phase, ...] = tuple(Phase)


class PoolKind(StrEnum):
    """What a device KV pool of one rank holds (docs/sglang.md, Seen in real deployments)."""

    # The pool SGLang counts as ``max_total_num_tokens``: what a HiCache ratio multiplies.
    TARGET = "target"
    # A speculative-decoding draft model's pool (EAGLE, MTP), logged once CUDA graphs began.
    DRAFT = "draft"
    # Another pool of the target model: a hybrid model's sliding-window pool, for instance.
    OTHER = "other"


class Dialect(StrEnum):
    """Which era of SGLang's log texts the log is written in."""

    V0_5_9 = "0.5.8-0.5.9"
    V0_5_23 = "0.5.23"


@dataclass(frozen=True, slots=True)
class PhaseStarted:
    """The start entered ``phase``: once per phase, in order, from the first rank to get there.

    ``[2026-02-24 11:18:37 TP3] Init torch distributed begin.`` gives
    ``PhaseStarted(Phase.INIT, at=2026-02-24 11:18:37, rank="TP3", line=...)``. A ``server_args=``
    line after the start got past ``init`` begins a new start: ``PhaseStarted(Phase.INIT)`` again.
    """

    phase: Phase
    at: datetime | None
    rank: str | None
    line: str
    # False when the line carried no time of its own (0.5.9's uvicorn lines) and ``at`` is the
    # last time seen: a bound, not when the phase began.
    stamped: bool = True


@dataclass(frozen=True, slots=True)
class DialectDetected:
    """The log's era, from the first line that only one era writes (``Init parallel begin.``)."""

    dialect: Dialect
    at: datetime | None
    line: str


@dataclass(frozen=True, slots=True)
class RankSeen:
    """A rank prefix appeared for the first time (``TP5`` from ``[... TP5] ...``)."""

    rank: str
    at: datetime | None


@dataclass(frozen=True, slots=True)
class ShardProgress:
    """Rank 0's weight-loading bar moved.

    ``Loading safetensors checkpoint shards:  27% Completed | 17/64 [00:11<00:29,  1.58it/s]``
    gives ``done=17, total=64``; a repaint of the same count gives nothing.
    """

    done: int
    total: int
    at: datetime | None


@dataclass(frozen=True, slots=True)
class GraphProgress:
    """Rank 0's CUDA graph capture bar moved.

    ``Capturing batches (bs=512 avail_mem=1.82 GB):  67%|██████▋   | 35/52 [00:09<00:04]`` gives
    ``done=35, total=52``.
    """

    done: int
    total: int
    at: datetime | None


@dataclass(frozen=True, slots=True)
class DevicePool:
    """One device KV pool of one rank; a rank can log several in one start.

    ``KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB`` gives ``tokens=159274,
    kv_gib=10.42``. SGLang's GB here is GiB (1024**3 bytes). An MHA model logs ``K size`` and
    ``V size``: ``kv_gib`` is their sum. 0.5.23 adds ``dtype: torch.bfloat16, `` before ``#tokens``
    and may put a label before ``KV Cache``; older logs print no ``#tokens`` (``tokens=None``: the
    count is ``max_total_num_tokens``). ``index`` counts the rank's pools in this start from 0;
    ``after_graphs`` is true for a pool logged once CUDA graph capture began, which is where a
    speculative-decoding draft model allocates its own (docs/sglang.md, Seen in real deployments).
    """

    rank: str | None
    tokens: int | None
    kv_gib: float
    k_gib: float | None
    v_gib: float | None
    dtype: str | None
    at: datetime | None
    line: str
    index: int = 0
    after_graphs: bool = False
    label: str | None = None


@dataclass(frozen=True, slots=True)
class HostPool:
    """One host allocation of one rank, logged just before SGLang pins it (silently, for minutes).

    ``Allocating 44.77 GB host memory for hierarchical KV cache.`` gives ``gb=44.77,
    tokens=None, pool="kv"``; 0.5.23's ``Allocating kv hierarchical KV host pool: 683061 tokens,
    48.00 GB host memory.`` gives ``gb=48.0, tokens=683061, pool="kv"``; a DSA indexer's
    ``Allocating 29.02 GB host memory for DSA indexer (layout=page_first).`` gives ``gb=29.02,
    pool="DSA indexer"``. GB here is 1e9 bytes, as logged. ``pool`` is ``"kv"`` (``KV_HOST_POOL``)
    for the HiCache KV pool, and another allocation's name otherwise: it is RAM all the same. A
    hybrid sliding-window model's ``Allocating full hierarchical KV host pool: ...`` is its KV
    pool (``"kv"``); ``Allocating swa ...`` gives ``pool="swa"``.
    """

    rank: str | None
    gb: float
    tokens: int | None
    pool: str
    at: datetime | None
    line: str


@dataclass(frozen=True, slots=True)
class SlidingWindowSplit:
    """A hybrid sliding-window model's two device pools of one rank, as sized before they are
    built (0.5.23): ``Use sliding window memory pool. full_layer_tokens=32997,
    swa_layer_tokens=26397`` gives ``full_tokens=32997, swa_tokens=26397``. A model whose layers
    are all sliding-window logs ``(all SWA). swa_layer_tokens=26397``: ``full_tokens=0``."""

    rank: str | None
    full_tokens: int
    swa_tokens: int
    at: datetime | None
    line: str


@dataclass(frozen=True, slots=True)
class SlidingWindowPool:
    """Both pools of a hybrid sliding-window model's rank, built: ``SWAKVPool mem usage: 5.14
    GB, swa size: 26397, full size: 32997`` gives ``kv_gib=5.14, swa_tokens=26397,
    full_tokens=32997`` (GiB, K and V of both pools, two decimals). ``upper_bound`` is true for
    ``SWAKVPool VA upper bound: ...``, the address space reserved before post-capture sizing."""

    rank: str | None
    kv_gib: float
    swa_tokens: int
    full_tokens: int
    upper_bound: bool
    at: datetime | None
    line: str


#: ``HostPool.pool`` of the HiCache KV host pool (the one ``--hicache-ratio``/``-size`` sizes).
KV_HOST_POOL = "kv"
#: 0.5.23's label of a hybrid sliding-window model's full-attention host pool, its KV pool.
HYBRID_FULL_HOST_POOL = "full"
#: 0.5.23's label of a hybrid sliding-window model's sliding-window host pool.
HYBRID_SWA_HOST_POOL = "swa"


#: A cgroup figure at or over this (1 PiB) is cgroup v1's "no limit", not a limit.
UNLIMITED_CGROUP_GIB = 1024.0**2


@dataclass(frozen=True, slots=True)
class MemoryHeadroom:
    """SGLang 0.5.23's own reading of its memory domain, logged by a rank in a memory cgroup
    before it sizes its host pools (``sglang/srt/mem_cache/host_memory.py``):
    ``HiCache memory headroom: host 123.4 GiB, cgroup 56.7 GiB`` gives ``host_gib=123.4,
    cgroup_gib=56.7`` (GiB, one decimal); SGLang plans with the smaller.

    On cgroup v1 the line is logged without any limit too: ``memory.limit_in_bytes`` of a
    cgroup with no limit reads 9223372036854771712, so the cgroup figure is about 8.6e9 GiB.
    """

    rank: str | None
    host_gib: float
    cgroup_gib: float
    at: datetime | None
    line: str

    @property
    def headroom_gib(self) -> float:
        return min(self.host_gib, self.cgroup_gib)

    @property
    def cgroup_limited(self) -> bool:
        """Whether the cgroup figure is a limit: v1's "no limit" reads as exabytes, and no
        machine holds a pebibyte of RAM."""
        return self.cgroup_gib < UNLIMITED_CGROUP_GIB


@dataclass(frozen=True, slots=True)
class HiCacheAutoSized:
    """0.5.23's auto-sizing, logged by each rank when neither --hicache-ratio nor --hicache-size
    is given: the ratio it lowered the default to, before any host pool is built.

    ``HiCache auto-sizing: ratio 2.000 -> 1.140; 12.0 GiB host memory per rank (fraction 0.80,
    1 ranks on this host), host pools 11.4 GiB.`` gives ``requested=2.0, ratio=1.14,
    budget_gib=12.0, fraction=0.8, ranks=1, host_pools_gib=11.4``. GiB here are 1024**3 bytes,
    as logged; the ratio has three decimals.
    """

    rank: str | None
    requested: float
    ratio: float
    budget_gib: float
    fraction: float
    ranks: int
    host_pools_gib: float
    at: datetime | None
    line: str


@dataclass(frozen=True, slots=True)
class MaxTotalTokens:
    """Rank 0's ``max_total_num_tokens=159274, chunked_prefill_size=...`` line: the device pool."""

    tokens: int
    at: datetime | None
    line: str


@dataclass(frozen=True, slots=True)
class FailureSeen:
    """The log says the start failed; re-emitted whenever the kind or the decisive lines grow.

    The last ``FailureSeen`` of a start holds its classification: a specific kind (``host_memory``,
    ``gpu_busy``, ``gpu_memory``, ``oom_killed``) wins over ``crash`` whatever order the lines
    arrive in. ``lines`` are the decisive log lines as logged (the specific message, the exception,
    the ``Received sigquit`` or ``scheduler died`` line), in log order, each distinct text once.
    """

    kind: FailureKind
    lines: tuple[str, ...]
    at: datetime | None


Event = (
    PhaseStarted
    | DialectDetected
    | RankSeen
    | ShardProgress
    | GraphProgress
    | DevicePool
    | HostPool
    | HiCacheAutoSized
    | MaxTotalTokens
    | SlidingWindowSplit
    | SlidingWindowPool
    | MemoryHeadroom
    | FailureSeen
)
