"""The planner: SGLang's HiCache sizing rules and the admission check, with no I/O.

>>> from bot.planner import ChangeRequest, DevicePool, HostMemory, ServerFacts, make_plan, GB
>>> plan = make_plan(
...     ChangeRequest(size_gb=300),
...     ServerFacts(ranks=8, device_pool=DevicePool(tokens=159274, bytes_per_token=70272)),
...     HostMemory(available_bytes=445 * GB),
... )
>>> plan.verdict.value
'refused'
"""

from __future__ import annotations

from bot.planner._auto_size import (
    AUTO_SIZE_DEFAULT_RATIO,
    AUTO_SIZE_FRACTION,
    AUTO_SIZE_SLACK,
    AutoSize,
    auto_size,
    per_rank_budget_bytes,
    start_headroom_bytes,
)
from bot.planner._estimate import (
    DeviceMemory,
    DevicePoolEstimate,
    DevicePoolSource,
    default_mem_fraction_static,
    estimate_device_pool,
)
from bot.planner._eta import DEFAULT_PIN_SECONDS_PER_GB, StartSample, estimate_startup_seconds
from bot.planner._host_pools import (
    SWA_POOL,
    DisaggregationMode,
    HostMemoryMode,
    HostPoolFlags,
    HostPoolPlan,
    HybridPools,
    MooncakeSegment,
    StorageBackend,
    default_ratio,
    hybrid_pools_from_log,
    mooncake_segment,
    parse_extra_config,
)
from bot.planner._kv_shape import KvShape, element_bytes, kv_shape_from_config
from bot.planner._live import (
    PREFETCH_POLICIES,
    WRITE_POLICIES,
    AdminKey,
    LiveChange,
    LiveDecision,
    LiveFacts,
    decide_live,
)
from bot.planner._per_token import BytesPerToken, BytesSource, resolve_bytes_per_token
from bot.planner._plan import (
    DEFAULT_HEADROOM_GB,
    ChangeRequest,
    HostMemory,
    Plan,
    ServerFacts,
    Verdict,
    make_plan,
)
from bot.planner._sizing import (
    DevicePool,
    HostExtra,
    HostPoolSize,
    host_pool_for_ratio,
    host_pool_for_size,
    host_tokens_for_ratio,
)
from bot.planner._units import GB, SGLANG_HOST_RESERVE_BYTES, GiB
from bot.planner._version import DEFAULT_SGLANG_VERSION, SGLangVersion

__all__ = [
    "AUTO_SIZE_DEFAULT_RATIO",
    "AUTO_SIZE_FRACTION",
    "AUTO_SIZE_SLACK",
    "DEFAULT_HEADROOM_GB",
    "DEFAULT_PIN_SECONDS_PER_GB",
    "DEFAULT_SGLANG_VERSION",
    "GB",
    "PREFETCH_POLICIES",
    "SGLANG_HOST_RESERVE_BYTES",
    "SWA_POOL",
    "WRITE_POLICIES",
    "AdminKey",
    "AutoSize",
    "BytesPerToken",
    "BytesSource",
    "ChangeRequest",
    "DeviceMemory",
    "DevicePool",
    "DevicePoolEstimate",
    "DevicePoolSource",
    "DisaggregationMode",
    "GiB",
    "HostExtra",
    "HostMemory",
    "HostMemoryMode",
    "HostPoolFlags",
    "HostPoolPlan",
    "HostPoolSize",
    "HybridPools",
    "KvShape",
    "LiveChange",
    "LiveDecision",
    "LiveFacts",
    "MooncakeSegment",
    "Plan",
    "SGLangVersion",
    "ServerFacts",
    "StartSample",
    "StorageBackend",
    "Verdict",
    "auto_size",
    "decide_live",
    "default_mem_fraction_static",
    "default_ratio",
    "element_bytes",
    "estimate_device_pool",
    "estimate_startup_seconds",
    "host_pool_for_ratio",
    "host_pool_for_size",
    "host_tokens_for_ratio",
    "hybrid_pools_from_log",
    "kv_shape_from_config",
    "make_plan",
    "mooncake_segment",
    "parse_extra_config",
    "per_rank_budget_bytes",
    "resolve_bytes_per_token",
    "start_headroom_bytes",
]
