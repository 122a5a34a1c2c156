"""The planner's sentences: what SGLang would reject, and the budget arithmetic.

Every refusal names the value and the fix ("try 44 or 45"); the budget sentence shows the
arithmetic a person can check (README.md, The budget rule).
"""

from __future__ import annotations

import math

from bot.planner._facts import ChangeRequest, HostMemory, ServerFacts, num
from bot.planner._sizing import DevicePool, HostPoolSize
from bot.planner._units import GB, SGLANG_HOST_RESERVE_BYTES
from bot.planner._version import SGLangVersion

__all__ = [
    "auto_sizing_off",
    "budget_sentence",
    "host_not_larger",
    "larger_than_device",
    "no_auto_sizing",
    "sentence",
    "sglang_would_reject",
    "suggestion",
]


def larger_than_device(size: HostPoolSize | None, pool: DevicePool) -> bool:
    return size is None or size.tokens is None or pool.tokens is None or size.tokens > pool.tokens


def sglang_would_reject(
    request: ChangeRequest, server: ServerFacts, pool: DevicePool
) -> str | None:
    if server.radix_cache_disabled:
        return (
            "HiCache cannot run with --disable-radix-cache (SGLang raises ValueError at start); "
            "remove that flag first"
        )
    if request.size_gb is not None:
        size = request.size_gb
        if not math.isfinite(size) or size != int(size):
            hint = ""
            if math.isfinite(size) and size > 0:
                hint = f" (try {math.floor(size)} or {math.ceil(size)})"
            return (
                f"hicache size '{num(size)}' is not a whole number of GB; "
                f"SGLang takes integers{hint}"
            )
        if size <= 0:
            return (
                f"hicache size '{num(size)}' must be at least 1 GB per rank "
                "(0 tells SGLang to use the ratio instead)"
            )
        return None
    assert request.ratio is not None
    ratio = request.ratio
    if not math.isfinite(ratio):
        return f"hicache ratio '{num(ratio)}' is not a finite number; try 2 or 4"
    if ratio <= 0:
        return (
            f"hicache ratio '{num(ratio)}' must be greater than 0; "
            "the host pool is ratio x the device pool"
        )
    return None


def host_not_larger(
    request: ChangeRequest,
    size: HostPoolSize,
    pool: DevicePool,
    version: SGLangVersion,
    warnings: list[str],
) -> str | None:
    if size.tokens is None or pool.tokens is None or size.tokens > pool.tokens:
        return None
    detail = (
        f"{request.phrase()} gives a host pool of {size.tokens:,} tokens per rank, "
        f"not larger than the device pool's {pool.tokens:,}"
    )
    if version.asserts_host_larger:
        return (
            f'{detail}: SGLang {version} refuses that ("The host memory should be larger than '
            'the device memory with the current protocol")'
        )
    warnings.append(f"{detail}: SGLang {version} starts, but HiCache adds little")
    return None


def budget_sentence(
    request: ChangeRequest,
    ranks: int,
    size: HostPoolSize,
    total: float,
    memory: HostMemory,
    free_after_stop: float,
    headroom: float,
    budget: float,
    left: float,
    extras: dict[str, int] | None = None,
) -> str:
    """ "ratio 4 needs 8 ranks x 44.75 GB = 358.0 GB; 445.0 GB free after stop - 10.7 GB SGLang
    reserve - 40.0 GB headroom leaves 394.3 GB: fits with 36.3 GB to spare." With extra host
    pools, each rank's figure shows them: "4 ranks x (126.61 GB KV + 29.03 GB DSA indexer)".
    When the server's cgroup gives less than the host, the figure says so, and a refusal
    starts with it: "the server's cgroup /system.slice/sglang.service allows 64.0 GB: ..."."""
    free = f"{free_after_stop / GB:.1f} GB free after stop"
    cgroup = f"the server's cgroup {memory.cgroup_path or ''}".rstrip()
    named = left < 0  # a refusal names the cgroup first; the figures then say "the cgroup"
    if memory.cgroup_binds:
        assert memory.cgroup_limit_bytes is not None
        limit = f"limit {memory.cgroup_limit_bytes / GB:.1f} GB"
        if memory.cgroup_headroom_bytes is None:
            free += f" (capped by {'the cgroup' if named else cgroup}'s {limit}"
        else:
            free += f" ({memory.cgroup_headroom_bytes / GB:.1f} headroom"
            if memory.server_held_bytes:
                free += f" + {memory.server_held_bytes / GB:.1f} released by the restart"
            free += f" in {'the cgroup' if named else cgroup}, {limit}"
        free += f"; the host alone has {memory.host_after_stop_bytes / GB:.1f})"
    elif memory.server_held_bytes:
        free += (
            f" ({memory.available_bytes / GB:.1f} available + "
            f"{memory.server_held_bytes / GB:.1f} released by the restart"
        )
        if free_after_stop < memory.available_bytes + memory.server_held_bytes:
            free += ", capped by the host's RAM"
        free += ")"
    outcome = (
        f"fits with {left / GB:.1f} GB to spare"
        if left >= 0
        else f"refused, {-left / GB:.1f} GB short"
    )
    per_rank = f"{size.bytes / GB:.2f} GB"
    if extras:
        parts = "".join(f" + {b / GB:.2f} GB {name}" for name, b in extras.items())
        per_rank = f"({per_rank} KV{parts})"
    allows = ""
    if memory.cgroup_binds and named:
        allows = f"{cgroup} allows {free_after_stop / GB:.1f} GB: "
    return allows + (
        f"{request.phrase()} needs {ranks} rank{'s' if ranks != 1 else ''} x "
        f"{per_rank} = {total / GB:.1f} GB; {free} - "
        f"{SGLANG_HOST_RESERVE_BYTES / GB:.1f} GB SGLang reserve - {headroom / GB:.1f} GB headroom "
        f"leaves {budget / GB:.1f} GB: {outcome}."
    )


def suggestion(request: ChangeRequest, largest_size: int, largest_ratio: float | None) -> str:
    if request.mode == "ratio" and largest_ratio:
        return f"; at most ratio {largest_ratio:g} fits (or size {largest_size} GB/rank)"
    if largest_size > 0:
        return f"; at most size {largest_size} GB/rank fits"
    return "; no HiCache size fits this host now"


def sentence(text: str) -> str:
    return text if text.endswith(".") else text + "."


def auto_sizing_off(request: ChangeRequest) -> str:
    """The warning on an explicit setting for a server SGLang sizes itself."""
    flag = "--hicache-size" if request.size_gb is not None else "--hicache-ratio"
    return (
        f"{request.phrase()} writes {flag}, which turns SGLang's auto-sizing off: the server "
        "keeps this size whatever memory is free at its next start (resize auto returns to it)"
    )


def no_auto_sizing(version: SGLangVersion) -> str:
    """The warning on ``auto`` for a version that has no auto-sizing."""
    return (
        f"SGLang {version} has no HiCache auto-sizing (0.5.23 and later have it): with neither "
        "--hicache-ratio nor --hicache-size it takes ratio 2, whatever RAM the host has"
    )


# -- live changes (bot.planner._live) ---------------------------------------------------------

_ADMIN_KEY_PROBLEMS = {
    "server_has_none": "the server was started without --admin-api-key, which the runtime API "
    "needs",
    "agent_has_none": "the agent holds no admin key ([agent] admin_api_key_env names none)",
    "differs": "the agent's admin key is not the server's --admin-api-key",
}


def admin_key_problem(state: str) -> str | None:
    """Why the admin key keeps a change from being live, or None when the agent holds it."""
    return _ADMIN_KEY_PROBLEMS.get(state)


def live_needs_restart(why: str) -> str:
    return f"needs a restart: {why}."


def live_reason(phrase: str, added_bytes: int) -> str:
    ram = f", adding {added_bytes / GB:.1f} GB of host RAM" if added_bytes else ""
    return (
        f"live (no restart): SGLang's runtime API can {phrase}{ram} once the server is idle "
        "(no request running or queued)."
    )
