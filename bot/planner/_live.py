"""Live or restart: whether SGLang's HiCache runtime API can make a change, and why (or why not).

The rule (docs/sglang.md, Live changes)::

    live      the server's SGLang has the runtime API (0.5.23 on)
              and it runs HiCache (--enable-hierarchical-cache)
              and it was started with --admin-api-key, the key the agent holds
              and the change is one the API makes:
                storage attach / detach / clear       PUT / DELETE / POST .../clear
                write policy / prefetch policy        PUT with the backend already attached
    restart   anything else: an older server, no admin key (or another one), no storage
              backend attached for a policy change, another backend attached for an attach
    refused   an attach whose host RAM does not fit: Mooncake's global segment is allocated by
              the running server, so it is planned against what the memory domain has now

>>> from bot.planner import SGLangVersion
>>> facts = LiveFacts(SGLangVersion.parse("0.5.23"), True, AdminKey.HELD, None)
>>> decide_live(LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="file"), facts).mode.value
'live'

Sizes, ratios, the memory layout and the I/O backend are never live: they size or shape pools
SGLang allocates once at start; they stay with :func:`bot.planner.make_plan` and a restart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bot.errors import PlanInputError
from bot.planner import _wording as words
from bot.planner._facts import HostMemory
from bot.planner._host_pools import StorageBackend, mooncake_segment
from bot.planner._units import GB
from bot.planner._version import SGLangVersion
from bot.vocab import ApplyMode, LiveChangeKind

__all__ = [
    "PREFETCH_POLICIES",
    "WRITE_POLICIES",
    "AdminKey",
    "LiveChange",
    "LiveDecision",
    "LiveFacts",
    "decide_live",
]

#: The values SGLang's runtime API accepts (``mem_cache/unified_cache/storage_attachment.py``).
WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")


class AdminKey(StrEnum):
    """The server's ``--admin-api-key`` against the key the agent holds."""

    HELD = "held"  # both set and equal
    SERVER_HAS_NONE = "server_has_none"
    AGENT_HAS_NONE = "agent_has_none"
    DIFFERS = "differs"


@dataclass(frozen=True)
class LiveChange:
    """One change the runtime API can make; values are checked here (PlanInputError)."""

    kind: LiveChangeKind
    backend: str | None = None
    #: The backend's extra config as JSON text (``hicache_storage_backend_extra_config_json``).
    extra_config: str | None = None
    policy: str | None = None

    def __post_init__(self) -> None:
        kind = self.kind
        if kind is LiveChangeKind.STORAGE_ATTACH:
            if not self.backend or not self.backend.replace("_", "").isalnum():
                raise PlanInputError(
                    f"storage backend {self.backend!r} is not a backend name such as file or "
                    "mooncake"
                )
            if self.extra_config is not None and not self.extra_config.startswith("@/"):
                # "@/path": a config file SGLang reads on the host (JSON, YAML or TOML).
                try:
                    parsed = json.loads(self.extra_config)
                except ValueError as exc:
                    raise PlanInputError(
                        f"the storage backend's extra config {self.extra_config!r} is not JSON "
                        f"({exc})"
                    ) from exc
                if not isinstance(parsed, dict):
                    raise PlanInputError(
                        f"the storage backend's extra config {self.extra_config!r} is not a "
                        'JSON object such as {"prefetch_threshold": 256}'
                    )
        elif kind is LiveChangeKind.WRITE_POLICY and self.policy not in WRITE_POLICIES:
            raise PlanInputError(
                f"write policy {self.policy!r} is not one SGLang knows; use one of "
                f"{', '.join(WRITE_POLICIES)}"
            )
        elif kind is LiveChangeKind.PREFETCH_POLICY and self.policy not in PREFETCH_POLICIES:
            raise PlanInputError(
                f"prefetch policy {self.policy!r} is not one SGLang knows; use one of "
                f"{', '.join(PREFETCH_POLICIES)}"
            )

    @property
    def extra(self) -> dict[str, Any]:
        if not self.extra_config or self.extra_config.startswith("@"):
            return {}
        return dict(json.loads(self.extra_config))

    def phrase(self) -> str:
        """ "attach storage backend file", "write policy write_back", ..."""
        kind = self.kind
        if kind is LiveChangeKind.STORAGE_ATTACH:
            return f"attach storage backend {self.backend}"
        if kind is LiveChangeKind.STORAGE_DETACH:
            return "detach the storage backend"
        if kind is LiveChangeKind.STORAGE_CLEAR:
            return "clear the storage backend"
        if kind is LiveChangeKind.WRITE_POLICY:
            return f"write policy {self.policy}"
        return f"prefetch policy {self.policy}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "backend": self.backend,
            "extra_config": self.extra_config,
            "policy": self.policy,
        }


@dataclass(frozen=True)
class LiveFacts:
    """What the decision needs of the server: its version, HiCache on or off, the admin key,
    the storage backend attached now (the live ``GET`` when the server answers it, else the
    command line), and for a RAM-adding attach the memory domain and the rank counts."""

    version: SGLangVersion
    hicache_enabled: bool
    admin_key: AdminKey
    attached_backend: str | None
    memory: HostMemory | None = None
    headroom_gb: float = 0.0
    #: Mooncake divides its global segment by TP x PP; ``local_ranks`` of them run here.
    storage_ranks: int = 1
    local_ranks: int = 1
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LiveDecision:
    """The verdict: live, restart or refused, the sentence why, and the host RAM an attach
    adds to the running server (Mooncake's segment; 0 for every other change)."""

    change: LiveChange
    mode: ApplyMode
    reason: str
    added_host_bytes: int = 0

    @property
    def live(self) -> bool:
        return self.mode is ApplyMode.LIVE

    def to_dict(self) -> dict[str, Any]:
        return {
            "change": self.change.to_dict(),
            "mode": self.mode.value,
            "reason": self.reason,
            "added_host_bytes": self.added_host_bytes,
        }


def decide_live(change: LiveChange, facts: LiveFacts) -> LiveDecision:
    """Live, restart or refused for ``change`` on the server ``facts`` describe."""

    def restart(reason: str) -> LiveDecision:
        return LiveDecision(change, ApplyMode.RESTART, words.live_needs_restart(reason))

    if not facts.version.has_hicache_runtime_api:
        return restart(f"SGLang {facts.version} has no HiCache runtime API (it came with 0.5.23)")
    if not facts.hicache_enabled:
        return restart("the server runs without HiCache (--enable-hierarchical-cache)")
    key_problem = words.admin_key_problem(facts.admin_key.value)
    if key_problem is not None:
        return restart(key_problem)
    kind = change.kind
    attached = facts.attached_backend
    if kind in (LiveChangeKind.WRITE_POLICY, LiveChangeKind.PREFETCH_POLICY) and attached is None:
        return restart(
            "SGLang changes a policy at run time only with a storage backend attached (a PUT of "
            "the same backend), and none is"
        )
    if kind is LiveChangeKind.STORAGE_ATTACH and attached not in (None, change.backend):
        return restart(
            f"storage backend {attached} is attached and SGLang attaches another only after a "
            "detach (detach it first, live)"
        )
    if kind in (LiveChangeKind.STORAGE_DETACH, LiveChangeKind.STORAGE_CLEAR) and attached is None:
        return LiveDecision(change, ApplyMode.REFUSED, "no storage backend is attached")
    added = 0
    # A same-backend attach only changes policies: the segment is allocated already.
    new_mooncake = change.backend == StorageBackend.MOONCAKE and attached != change.backend
    if kind is LiveChangeKind.STORAGE_ATTACH and new_mooncake:
        refused, added = _mooncake_fits(change, facts)
        if refused is not None:
            return LiveDecision(change, ApplyMode.REFUSED, refused, added)
    return LiveDecision(change, ApplyMode.LIVE, words.live_reason(change.phrase(), added), added)


def _mooncake_fits(change: LiveChange, facts: LiveFacts) -> tuple[str | None, int]:
    """Mooncake's segment on this host against what the memory domain has now."""
    segment = mooncake_segment(change.extra, facts.environ)
    if segment.global_bytes is None:
        return (
            f"Mooncake's global_segment_size is unknown ({segment.problem}); it is host RAM the "
            "running server would allocate, so the attach cannot be planned",
            0,
        )
    ranks = max(1, facts.storage_ranks)
    added = 0 if segment.standalone else segment.global_bytes // ranks * max(1, facts.local_ranks)
    if added == 0:
        return None, 0
    memory = facts.memory
    if memory is None:
        return "the host's memory could not be read, so Mooncake's segment cannot be planned", added
    free = memory.available_bytes
    if memory.cgroup_headroom_bytes is not None:
        free = min(free, memory.cgroup_headroom_bytes)
    left = free - facts.headroom_gb * GB - added
    if left < 0:
        return (
            f"Mooncake's segment needs {added / GB:.1f} GB ({segment.source}); the memory domain "
            f"has {free / GB:.1f} GB now less {facts.headroom_gb:g} GB headroom: "
            f"{-left / GB:.1f} GB short (lower global_segment_size)",
            added,
        )
    return None, added
