"""The host pools of one rank: every host allocation SGLang 0.5.23 makes beside the device pool
(docs/sglang.md, Host pools)::

    HiCache KV pool        ratio x device tokens, or --hicache-size N GB       (pool_host/base.py)
    hybrid SWA             a full-attention and a sliding-window pool, each ratio x its own
                           tokens; under --hicache-size N, 0.5.23 splits N by the pools' device
                           bytes, earlier releases give N to each  (hybrid_pool_assembler.py)
    decode offload         --disaggregation-decode-enable-offload-kvcache: a second KV pool of
                           the same rule, with its own storage client
                           (disaggregation/decode_kvcache_offload_manager.py)
    Mooncake segment       global_segment_size // (TP x PP), per storage client
                           (storage/mooncake_store/mooncake_store.py)
    DSA indexer, draft     scaled with the KV pool as the last start logged (``HostExtra``)

A decode server (``--disaggregation-mode decode``) keeps a retraction backup host pool even
without HiCache; its default ratio is 0.2, raised so one longest request fits
(``kv_cache_builder.py``, ``resolve_decode_retraction_backup``); ``buffer_only`` defaults the
ratio to 1.2 (``arg_groups/hicache_hook.py``). A value kimi-ops does not know the RAM of (a
storage backend, a memory mode, a disaggregation mode) is refused, never planned as absent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.planner._sizing import HostPoolSize, _page_aligned
from bot.planner._units import GB, GiB
from bot.planner._version import SGLangVersion

__all__ = [
    "BACKUP_ONLY_RATIO",
    "BUFFER_ONLY_RATIO",
    "DEFAULT_RATIO",
    "SWA_POOL",
    "DisaggregationMode",
    "HostMemoryMode",
    "HostPoolFlags",
    "HostPoolPlan",
    "HybridPools",
    "MooncakeSegment",
    "RetractionBackup",
    "StorageBackend",
    "default_ratio",
    "hybrid_pools_for_ratio",
    "hybrid_pools_for_size",
    "hybrid_pools_from_log",
    "mooncake_segment",
    "parse_segment_size",
    "rejected_by_sglang",
    "retraction_backup",
    "unknown_configuration",
]

#: The sliding-window host pool's name, as 0.5.23 labels it in its log ("Allocating swa ...").
SWA_POOL = "swa"

#: ``--hicache-ratio`` when none is given, by what the host pool is for.
DEFAULT_RATIO = 2.0
BUFFER_ONLY_RATIO = 1.2
BACKUP_ONLY_RATIO = 0.2  # kv_cache_builder.BACKUP_ONLY_HICACHE_RATIO

# Mooncake's default segment ("4gb", MOONCAKE_GLOBAL_SEGMENT_SIZE's default): 4 GiB.
_MOONCAKE_DEFAULT_SEGMENT = "4gb"


class DisaggregationMode(StrEnum):
    """``--disaggregation-mode``: PD disaggregation's role of the server."""

    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


class HostMemoryMode(StrEnum):
    """``--hicache-host-memory-mode``: a cache tier, or a staging buffer before storage."""

    CACHE = "cache"
    BUFFER_ONLY = "buffer_only"


class StorageBackend(StrEnum):
    """The ``--hicache-storage-backend`` values whose host RAM kimi-ops knows: ``file`` keeps
    none beside the host pool, ``mooncake`` adds its global segment."""

    FILE = "file"
    MOONCAKE = "mooncake"


class RetractionBackup(StrEnum):
    """``--disaggregation-decode-retraction-backup``: where a decode server keeps the KV of a
    retracted request. Only ``host_pool`` is a pool sized at start; ``cpu_tensor`` copies one
    request at a time when it is retracted."""

    HOST_POOL = "host_pool"
    CPU_TENSOR = "cpu_tensor"
    NONE = "none"


@dataclass(frozen=True)
class MooncakeSegment:
    """Mooncake's ``global_segment_size`` as SGLang resolves it: ``global_bytes`` for the whole
    server (None when it cannot be read: ``problem`` says why), where it came from, and whether
    a standalone Mooncake client holds it (then the server allocates none of it)."""

    global_bytes: int | None
    source: str
    standalone: bool = False
    problem: str | None = None


@dataclass(frozen=True)
class HostPoolFlags:
    """What the server's command line says of its host pools, besides the HiCache size.

    Values are kept as written, so an unknown one can be refused naming it. ``storage_ranks`` is
    what Mooncake divides its segment by: TP (attention TP under DP attention) x PP.
    """

    disaggregation_mode: str = DisaggregationMode.NULL.value
    decode_offload: bool = False
    retraction_backup: str | None = None
    decode_radix_cache: bool = False
    priority_preemption: bool = False
    host_memory_mode: str = HostMemoryMode.CACHE.value
    storage_backend: str | None = None
    mooncake: MooncakeSegment | None = None
    storage_ranks: int = 1

    @property
    def decode(self) -> bool:
        return self.disaggregation_mode == DisaggregationMode.DECODE.value


@dataclass(frozen=True)
class HybridPools:
    """A hybrid sliding-window model's two device pools of one rank, as 0.5.23 logs them
    (``Use sliding window memory pool. full_layer_tokens=32997, swa_layer_tokens=26397``), with
    each pool's KV bytes per token (its layers' bytes)."""

    full_tokens: int
    swa_tokens: int
    full_bytes_per_token: int
    swa_bytes_per_token: int


@dataclass(frozen=True)
class HostPoolPlan:
    """One host allocation of one rank: its name, bytes, tokens (None for a segment) and the
    rule that sized it, in words."""

    name: str
    bytes: int
    tokens: int | None
    rule: str

    @property
    def gb(self) -> float:
        return self.bytes / GB


def unknown_configuration(flags: HostPoolFlags) -> str | None:
    """Why kimi-ops cannot plan this server's host RAM (a value it does not know), or None."""
    modes = [mode.value for mode in DisaggregationMode]
    if flags.disaggregation_mode not in modes:
        return (
            f"--disaggregation-mode {flags.disaggregation_mode!r} is not one kimi-ops knows "
            f"({', '.join(modes)}), so the host pools it allocates cannot be planned"
        )
    memory_modes = [mode.value for mode in HostMemoryMode]
    if flags.host_memory_mode not in memory_modes:
        return (
            f"--hicache-host-memory-mode {flags.host_memory_mode!r} is not one kimi-ops knows "
            f"({', '.join(memory_modes)}), so its host pool cannot be planned"
        )
    backends = [backend.value for backend in StorageBackend]
    if flags.storage_backend is not None and flags.storage_backend not in backends:
        return (
            f"--hicache-storage-backend {flags.storage_backend!r}: kimi-ops does not know how "
            f"much host RAM it allocates beside the host pool (it knows {', '.join(backends)}), "
            "so the plan cannot count it"
        )
    backups = [backup.value for backup in RetractionBackup]
    if flags.retraction_backup is not None and flags.retraction_backup not in backups:
        return (
            f"--disaggregation-decode-retraction-backup {flags.retraction_backup!r} is not one "
            f"kimi-ops knows ({', '.join(backups)}), so its host pool cannot be planned"
        )
    mooncake = flags.mooncake
    if flags.storage_backend == StorageBackend.MOONCAKE and (
        mooncake is None or mooncake.global_bytes is None
    ):
        why = "it was not read" if mooncake is None else mooncake.problem
        return (
            f"the Mooncake storage backend's global_segment_size is unknown ({why}); it is "
            "host RAM on top of the host pool, so the plan cannot count it"
        )
    return None


def rejected_by_sglang(flags: HostPoolFlags, hybrid: bool) -> str | None:
    """What SGLang 0.5.23 itself raises at start for these flags, or None."""
    backend = flags.storage_backend
    if flags.host_memory_mode == HostMemoryMode.BUFFER_ONLY:
        if backend is None:
            return (
                "--hicache-host-memory-mode buffer_only needs a storage backend "
                "(--hicache-storage-backend); SGLang raises ValueError without one"
            )
        if flags.decode:
            return (
                "--hicache-host-memory-mode buffer_only is not supported on a decode server "
                "(SGLang raises ValueError); use it on the prefill server"
            )
    if flags.decode_offload:
        if not flags.decode:
            return (
                "--disaggregation-decode-enable-offload-kvcache is only for a decode server "
                "(--disaggregation-mode decode); SGLang raises ValueError"
            )
        if backend is None:
            return (
                "--disaggregation-decode-enable-offload-kvcache needs --hicache-storage-backend; "
                "SGLang raises ValueError without one"
            )
        if flags.retraction_backup == RetractionBackup.HOST_POOL:
            return (
                "--disaggregation-decode-enable-offload-kvcache and "
                "--disaggregation-decode-retraction-backup host_pool both build a decode host "
                "pool; SGLang refuses the two together"
            )
        if hybrid:
            return (
                "decode KV offload supports plain MHA and MLA device pools, not a hybrid "
                "sliding-window pool (SGLang raises 'Unsupported KV cache type for decode "
                "offload')"
            )
    return None


def retraction_backup(flags: HostPoolFlags, attention: str | None) -> RetractionBackup | None:
    """How a decode server keeps retracted requests (None when the server is not a decode
    server), as ``resolve_decode_retraction_backup`` picks it on CUDA: the flag when given,
    else a host pool for MHA and SWA models unless decode offload, the decode radix cache or
    priority preemption is on. An MLA model keeps CPU tensors; an unknown attention is taken as
    MHA, the side that plans a pool."""
    if not flags.decode:
        return None
    if flags.retraction_backup is not None:
        return RetractionBackup(flags.retraction_backup)
    if (
        flags.decode_offload
        or flags.decode_radix_cache
        or flags.priority_preemption
        or attention == "MLA"
    ):
        return RetractionBackup.CPU_TENSOR
    return RetractionBackup.HOST_POOL


def default_ratio(
    flags: HostPoolFlags,
    hicache_enabled: bool,
    attention: str | None = None,
    device_tokens: int | None = None,
    longest_request_tokens: int | None = None,
    page_size: int = 1,
    host_receive: bool = False,
) -> tuple[float, str]:
    """The ratio SGLang starts from when none is given, and why (before 0.5.23's auto-sizing
    lowers it): 1.2 for ``buffer_only``; for a decode server's backup-only retraction pool 0.2,
    or more so the longest request fits (twice when host receive is on); else 2.0.

    ``longest_request_tokens`` is the request-to-token row length minus one (the context length
    plus SGLang's few extra slots, minus one); unknown, the device pool stands in for it, which
    is the most the floor can reach.
    """
    if flags.host_memory_mode == HostMemoryMode.BUFFER_ONLY and not flags.decode:
        return BUFFER_ONLY_RATIO, "buffer_only's default ratio 1.2"
    backup = retraction_backup(flags, attention)
    if backup is not RetractionBackup.HOST_POOL or hicache_enabled:
        return DEFAULT_RATIO, "SGLang's default ratio 2"
    if device_tokens is None or device_tokens <= 0:
        return BACKUP_ONLY_RATIO, "the decode retraction backup's ratio 0.2"
    longest = device_tokens if longest_request_tokens is None else longest_request_tokens
    tokens = min(longest, device_tokens)
    tokens = -(-tokens // page_size) * page_size  # ceil_align
    if host_receive:
        tokens *= 2
    floor = tokens / device_tokens
    if floor <= BACKUP_ONLY_RATIO:
        return BACKUP_ONLY_RATIO, "the decode retraction backup's ratio 0.2"
    known = "" if longest_request_tokens is not None else " (the context length unknown: all)"
    return floor, (
        f"the decode retraction backup's ratio, raised from 0.2 to {floor:.3f} so the longest "
        f"request ({tokens:,} tokens{known}) fits"
    )


def hybrid_pools_from_log(
    full_tokens: int,
    swa_tokens: int,
    full_kv_gib: float | None,
    swa_kv_gib: float | None,
    kv_gib: float | None,
    page_size: int,
) -> HybridPools | None:
    """A hybrid model's pools from its start's log: each pool's bytes per token at the top of
    its logged GiB's rounding (``Full KV Cache is allocated. ...``, ``SWA KV Cache ...``), or,
    when only ``SWAKVPool mem usage`` is logged, the whole size over each pool's rows (more
    than either pool has: the side that counts more RAM). None when no size is logged or a
    pool is empty (all sliding-window layers)."""
    if full_tokens < 1 or swa_tokens < 1:
        return None

    def top(gib: float | None, tokens: int) -> int | None:
        if gib is None or gib <= 0:
            return None
        return math.ceil((gib + 0.005) * GiB / (tokens + page_size))

    full = top(full_kv_gib, full_tokens)
    swa = top(swa_kv_gib, swa_tokens)
    if full is None or swa is None:
        full, swa = top(kv_gib, full_tokens), top(kv_gib, swa_tokens)
    if full is None or swa is None:
        return None
    return HybridPools(full_tokens, swa_tokens, full, swa)


def hybrid_pools_for_ratio(
    ratio: float, hybrid: HybridPools, page_size: int
) -> tuple[HostPoolSize, HostPoolSize]:
    """The full-attention and sliding-window host pools at ``--hicache-ratio R``: each R x its
    own device tokens, page aligned plus the extra page."""
    full = _page_aligned(int(hybrid.full_tokens * ratio), page_size)
    swa = _page_aligned(int(hybrid.swa_tokens * ratio), page_size)
    return (
        HostPoolSize(tokens=full, bytes=full * hybrid.full_bytes_per_token),
        HostPoolSize(tokens=swa, bytes=swa * hybrid.swa_bytes_per_token),
    )


def hybrid_pools_for_size(
    size_gb: int, hybrid: HybridPools, page_size: int, version: SGLangVersion
) -> tuple[HostPoolSize, HostPoolSize]:
    """The two host pools at ``--hicache-size N``. 0.5.23 gives each pool N x its share of the
    device bytes (``_split_hicache_size``: a device pool holds its tokens plus one page), in
    SGLang's own float arithmetic; earlier releases give N to each pool."""
    full_device = (hybrid.full_tokens + page_size) * hybrid.full_bytes_per_token
    swa_device = (hybrid.swa_tokens + page_size) * hybrid.swa_bytes_per_token
    if version.splits_hybrid_hicache_size:
        total = full_device + swa_device
        full_share: float = size_gb * full_device / total
        swa_share: float = size_gb * swa_device / total
    else:
        full_share = swa_share = float(size_gb)
    full = _page_aligned(int(full_share * 1e9 // hybrid.full_bytes_per_token), page_size)
    swa = _page_aligned(int(swa_share * 1e9 // hybrid.swa_bytes_per_token), page_size)
    return (
        HostPoolSize(tokens=full, bytes=full * hybrid.full_bytes_per_token),
        HostPoolSize(tokens=swa, bytes=swa * hybrid.swa_bytes_per_token),
    )


def mooncake_pools(flags: HostPoolFlags, clients: int) -> tuple[HostPoolPlan, ...]:
    """Mooncake's segment of each storage client of one rank: ``global_segment_size // (TP x
    PP)`` each (none when a standalone Mooncake client holds it)."""
    segment = flags.mooncake
    if flags.storage_backend != StorageBackend.MOONCAKE or segment is None:
        return ()
    if segment.global_bytes is None or clients < 1:
        return ()
    ranks = max(1, flags.storage_ranks)
    per_rank = 0 if segment.standalone else segment.global_bytes // ranks
    rule = (
        f"global_segment_size {segment.global_bytes / GiB:g} GiB ({segment.source}) // "
        f"{ranks} (TP x PP)"
    )
    if segment.standalone:
        rule = "held by the standalone Mooncake client, outside the server"
    names = ["Mooncake segment", "Mooncake segment (decode offload)"]
    return tuple(
        HostPoolPlan(name=names[min(index, 1)], bytes=per_rank, tokens=None, rule=rule)
        for index in range(clients)
    )


def parse_segment_size(value: Any) -> int:
    """Mooncake's ``global_segment_size``: an int is bytes, ``"16gb"`` is 16 GiB, any other
    string a whole number of bytes (``_parse_global_segment_size``). Raises ValueError as
    SGLang does on anything else ("1.5gb" included)."""
    if isinstance(value, bool):
        raise ValueError(f"global_segment_size {value!r} is not a size")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text.endswith("gb"):
            number = text[:-2].strip()
            if not number:
                raise ValueError("global_segment_size: no number before 'gb'")
            return int(number) * GiB
        return int(text)
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    raise ValueError(f"global_segment_size {value!r} is not a size")


def mooncake_segment(
    extra_config: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    config_file: Mapping[str, Any] | None = None,
) -> MooncakeSegment:
    """Mooncake's global segment as ``MooncakeStore._load_config`` finds it: from
    ``--hicache-storage-backend-extra-config`` when it names a master or client address (a
    missing ``global_segment_size`` is then 4 GiB, whatever the environment says); else from
    the file ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH`` names (``config_file``, parsed by the
    caller); else from ``MOONCAKE_GLOBAL_SEGMENT_SIZE`` (default ``4gb``), which needs
    ``MOONCAKE_MASTER`` or ``MOONCAKE_CLIENT``."""
    extra = extra_config or {}
    try:
        if (
            extra.get("master_server_address") is not None
            or extra.get("client_server_address") is not None
        ):
            raw = extra.get("global_segment_size", _MOONCAKE_DEFAULT_SEGMENT)
            return MooncakeSegment(
                parse_segment_size(raw),
                "--hicache-storage-backend-extra-config",
                _truthy(extra.get("standalone_storage", False)),
            )
        if "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH" in environ:
            path = environ["SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"]
            if config_file is None:
                return MooncakeSegment(None, path, problem=f"the config file {path} is unreadable")
            if (
                "master_server_address" not in config_file
                and "client_server_address" not in config_file
            ):
                return MooncakeSegment(
                    None,
                    path,
                    problem=f"{path} names no master_server_address or client_server_address "
                    "(SGLang raises ValueError)",
                )
            raw = config_file.get("global_segment_size", _MOONCAKE_DEFAULT_SEGMENT)
            return MooncakeSegment(
                parse_segment_size(raw),
                path,
                _truthy(config_file.get("standalone_storage", False)),
            )
        if "MOONCAKE_MASTER" not in environ and "MOONCAKE_CLIENT" not in environ:
            return MooncakeSegment(
                None,
                "the environment",
                problem="neither the extra config, SGLANG_HICACHE_MOONCAKE_CONFIG_PATH nor "
                "MOONCAKE_MASTER/MOONCAKE_CLIENT configures Mooncake (SGLang raises ValueError)",
            )
        raw = environ.get("MOONCAKE_GLOBAL_SEGMENT_SIZE", _MOONCAKE_DEFAULT_SEGMENT)
        standalone = environ.get("MOONCAKE_STANDALONE_STORAGE", "false")
        return MooncakeSegment(
            parse_segment_size(raw), "MOONCAKE_GLOBAL_SEGMENT_SIZE", _truthy(standalone)
        )
    except ValueError as exc:
        return MooncakeSegment(None, "the Mooncake config", problem=str(exc))


def parse_extra_config(text: str, read_file: Any = None) -> dict[str, Any]:
    """``--hicache-storage-backend-extra-config``: a JSON object, or ``@path`` to a JSON file
    (``read_file(path) -> str`` reads it). Raises ValueError naming what is wrong."""
    if text.startswith("@"):
        path = text[1:]
        if not path.lower().endswith(".json"):
            raise ValueError(
                f"extra config file {path!r}: kimi-ops reads JSON files only (SGLang also "
                "takes TOML and YAML)"
            )
        if read_file is None:
            raise ValueError(f"extra config file {path!r} cannot be read here")
        text = read_file(path)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the storage backend extra config is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("the storage backend extra config is not a JSON object")
    return value


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "y")
    return bool(value)
