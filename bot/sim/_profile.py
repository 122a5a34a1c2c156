"""Host profiles: the machine a simulated SGLang server believes it runs on.

A profile is a JSON file, either shipped in ``bot/sim/profiles/<name>.json`` or given by path.
RAM figures are GB of 1e9 bytes (as SGLang's host pool line prints them); GPU figures are GiB
(as SGLang's device lines print them). Durations are seconds at time scale 1 (real time).

Optional model shapes seen in real deployments (docs/sglang.md, Seen in real deployments):

- ``draft_kv_bytes_per_token``: a speculative-decoding draft model whose own, far smaller pool
  (same tokens) is logged after the target's CUDA graphs, as SGLang's EAGLE worker does;
- ``hybrid_pools``: pools logged before the target's, e.g. ``[{"tokens_fraction": 0.8,
  "kv_bytes_per_token": 4096}]`` for a sliding-window pool of 0.8 x the target's tokens;
- ``host_extra_pools``: other host allocations per rank beside the KV host pool, by name, in bytes
  per host token: ``{"DSA indexer": 10296}`` logs ``Allocating X GB host memory for DSA indexer``.

Each shipped profile's model files (``config.json``, ``model.safetensors.index.json``, no weights)
are in ``bot/sim/models/<name>/``, for ``--model-path``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.errors import SimError
from bot.sim._sizing import GIB

__all__ = ["PHASES", "HostProfile", "HybridPool", "load_profile", "model_dir", "profile_names"]

PROFILES_DIR = Path(__file__).with_name("profiles")
MODELS_DIR = Path(__file__).with_name("models")

#: Startup phases with a duration in every profile, in the order a start runs them.
PHASES = (
    "init",
    "init_parallel",
    "load_weights",
    "kv_pool",
    "cuda_graph",
    "host_pool",
    "http",
    "warmup",
)


@dataclass(frozen=True)
class HybridPool:
    """A device pool logged before the target's: ``tokens_fraction`` of its tokens."""

    tokens_fraction: float
    kv_bytes_per_token: int


@dataclass(frozen=True)
class HostProfile:
    """What the simulated host has and how long each startup phase takes at time scale 1."""

    name: str
    ram_total_gb: float
    ram_available_gb: float
    gpu_count: int
    gpu_name: str
    gpu_memory_gib: float
    gpu_free_at_start_gib: float
    init_mem_usage_gib: float
    weights_gib: float
    other_pools_gib: float
    cuda_graph_gib: float
    kv_bytes_per_token: int
    kv_cache_dtype: str
    attention: str
    architecture: str
    model_shards: int
    context_len: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    max_running_requests: int
    cuda_graph_batch_sizes: int
    device_tokens: tuple[tuple[float, int], ...]
    default_mem_fraction_static: float
    phase_seconds: tuple[tuple[str, float], ...]
    pin_gb_per_s: float = 2.0
    server_ram_gb_per_rank: float = 4.0
    server_ram_gb_main: float = 2.0
    leftover_release_s: float = 26.0
    draft_kv_bytes_per_token: int = 0
    hybrid_pools: tuple[HybridPool, ...] = ()
    host_extra_pools: tuple[tuple[str, int], ...] = ()
    #: The memory cgroup the server runs in (``memory.max`` / ``memory.limit_in_bytes``), GB;
    #: None: no limit. SGLang 0.5.23 sizes against min(host, cgroup room) and logs both.
    cgroup_limit_gb: float | None = None
    #: Host RAM each of the server's processes maps shared with the others (torch's libraries,
    #: shared memory), GB: counted once in the tree's PSS, once per process in its RSS.
    shared_gb: float = 0.0
    #: The one hybrid pool is a sliding-window pool: 0.5.23 logs the SWA split and the
    #: SWAKVPool's usage instead of two unrelated pools.
    swa_pool: bool = False
    description: str = ""
    source: str = ""

    @property
    def ram_total_bytes(self) -> int:
        return int(self.ram_total_gb * 1e9)

    @property
    def cgroup_limit_bytes(self) -> int | None:
        return None if self.cgroup_limit_gb is None else int(self.cgroup_limit_gb * 1e9)

    @property
    def ram_available_bytes(self) -> int:
        return int(self.ram_available_gb * 1e9)

    @property
    def gpu_memory_bytes(self) -> int:
        return int(self.gpu_memory_gib * GIB)

    def phase(self, name: str) -> float:
        """Seconds the phase ``name`` takes at time scale 1."""
        return dict(self.phase_seconds)[name]

    def device_tokens_at(self, fraction: float) -> int:
        """Device KV tokens for ``--mem-fraction-static fraction``, linear between table points.

        Outside the table the nearest segment is extended, never below zero.
        """
        points = self.device_tokens
        if len(points) == 1:
            return points[0][1]
        lo, hi = points[0], points[1]
        for left, right in itertools.pairwise(points):
            lo, hi = left, right
            if fraction <= right[0]:
                break
        slope = (hi[1] - lo[1]) / (hi[0] - lo[0])
        return max(0, round(lo[1] + slope * (fraction - lo[0])))


def model_dir(profile_name: str) -> Path:
    """The model directory shipped for a profile (``config.json`` and the safetensors index)."""
    path = MODELS_DIR / profile_name
    if not (path / "config.json").is_file():
        raise SimError(f"no model files are shipped for profile {profile_name!r}")
    return path


def profile_names() -> list[str]:
    """Names of the profiles shipped with kimi-ops."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


def load_profile(name_or_path: str) -> HostProfile:
    """Load a shipped profile by name (``kimi-k25-8gpu``) or any profile file by path."""
    candidate = Path(name_or_path)
    if name_or_path.endswith(".json") or candidate.is_file() or "/" in name_or_path:
        path = candidate
    else:
        path = PROFILES_DIR / f"{name_or_path}.json"
    if not path.is_file():
        raise SimError(
            f"host profile {name_or_path!r} not found; use one of {profile_names()} "
            "or the path of a profile JSON file"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SimError(f"host profile {str(path)!r} is not readable JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise SimError(f"host profile {str(path)!r} must hold a JSON object")
    return _build(raw, str(path))


_FLOATS = (
    "ram_total_gb",
    "ram_available_gb",
    "gpu_memory_gib",
    "gpu_free_at_start_gib",
    "init_mem_usage_gib",
    "weights_gib",
    "other_pools_gib",
    "cuda_graph_gib",
    "default_mem_fraction_static",
)
_OPTIONAL_FLOATS = (
    "shared_gb",
    "pin_gb_per_s",
    "server_ram_gb_per_rank",
    "server_ram_gb_main",
    "leftover_release_s",
)
_INTS = (
    "gpu_count",
    "kv_bytes_per_token",
    "model_shards",
    "context_len",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_running_requests",
    "cuda_graph_batch_sizes",
)
_STRS = ("name", "gpu_name", "kv_cache_dtype", "attention", "architecture")


def _build(raw: Mapping[str, Any], source: str) -> HostProfile:
    values: dict[str, Any] = {"source": source, "description": str(raw.get("description", ""))}
    for key in _STRS:
        values[key] = _field(raw, key, str, source)
    for key in _INTS:
        number = _field(raw, key, int, source)
        if number <= 0:
            raise SimError(f"host profile {source!r}: {key} must be positive, not {number}")
        values[key] = number
    for key in (*_FLOATS, *_OPTIONAL_FLOATS):
        if key in _OPTIONAL_FLOATS and key not in raw:
            continue
        number = float(_field(raw, key, (int, float), source))
        if not math.isfinite(number) or number < 0:
            raise SimError(f"host profile {source!r}: {key} must be a finite number >= 0")
        values[key] = number
    if values["ram_available_gb"] > values["ram_total_gb"]:
        raise SimError(f"host profile {source!r}: ram_available_gb exceeds ram_total_gb")
    values["device_tokens"] = _device_table(raw.get("device_tokens"), source)
    values.update(_model_shapes(raw, source))
    values["phase_seconds"] = _phases(raw.get("phase_seconds"), source)
    return HostProfile(**values)


def _model_shapes(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The optional draft, hybrid and extra host pools, validated."""
    out: dict[str, Any] = {}
    draft = raw.get("draft_kv_bytes_per_token", 0)
    if isinstance(draft, bool) or not isinstance(draft, int) or draft < 0:
        raise SimError(f"host profile {source!r}: draft_kv_bytes_per_token must be a count >= 0")
    out["draft_kv_bytes_per_token"] = draft
    pools: list[HybridPool] = []
    for item in raw.get("hybrid_pools", []):
        fraction = item.get("tokens_fraction") if isinstance(item, dict) else None
        per_token = item.get("kv_bytes_per_token") if isinstance(item, dict) else None
        if (
            not isinstance(fraction, int | float)
            or not 0 < fraction <= 4
            or not isinstance(per_token, int)
            or per_token <= 0
        ):
            raise SimError(
                f"host profile {source!r}: each hybrid_pools entry needs tokens_fraction in "
                '(0, 4] and kv_bytes_per_token > 0, e.g. {"tokens_fraction": 0.8, '
                '"kv_bytes_per_token": 4096}'
            )
        pools.append(HybridPool(float(fraction), per_token))
    out["hybrid_pools"] = tuple(pools)
    extras = raw.get("host_extra_pools", {})
    if not isinstance(extras, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in extras.values()
    ):
        raise SimError(
            f"host profile {source!r}: host_extra_pools must map a name to bytes per host "
            'token, e.g. {"DSA indexer": 10296}'
        )
    out["host_extra_pools"] = tuple((str(k), int(v)) for k, v in extras.items())
    limit = raw.get("cgroup_limit_gb")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:
            raise SimError(
                f"host profile {source!r}: cgroup_limit_gb must be a number of GB > 0 "
                "(or absent for no limit)"
            )
        out["cgroup_limit_gb"] = float(limit)
    swa = raw.get("swa_pool", False)
    if not isinstance(swa, bool) or (swa and len(pools) != 1):
        raise SimError(
            f"host profile {source!r}: swa_pool must be true or false, and true needs exactly "
            "one hybrid_pools entry (the sliding-window pool)"
        )
    out["swa_pool"] = swa
    return out


def _field(raw: Mapping[str, Any], key: str, kind: type | tuple[type, ...], source: str) -> Any:
    if key not in raw:
        raise SimError(f"host profile {source!r} lacks the field {key!r}")
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise SimError(f"host profile {source!r}: {key} has the wrong type ({value!r})")
    return value


def _device_table(raw: object, source: str) -> tuple[tuple[float, int], ...]:
    if not isinstance(raw, dict) or not raw:
        raise SimError(
            f"host profile {source!r}: device_tokens must map mem_fraction_static to tokens, "
            'e.g. {"0.88": 159274}'
        )
    points: list[tuple[float, int]] = []
    for key, tokens in raw.items():
        try:
            fraction = float(key)
        except ValueError as exc:
            raise SimError(f"host profile {source!r}: device_tokens key {key!r}") from exc
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
            raise SimError(f"host profile {source!r}: device_tokens[{key!r}] must be a count")
        points.append((fraction, tokens))
    return tuple(sorted(points))


def _phases(raw: object, source: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(raw, dict):
        raise SimError(f"host profile {source!r}: phase_seconds must be an object")
    missing = [p for p in PHASES if p not in raw]
    if missing:
        raise SimError(f"host profile {source!r}: phase_seconds lacks {missing}")
    out: list[tuple[str, float]] = []
    for phase in PHASES:
        value = raw[phase]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise SimError(f"host profile {source!r}: phase_seconds[{phase!r}] must be >= 0")
        out.append((phase, float(value)))
    return tuple(out)
