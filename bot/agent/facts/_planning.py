"""Plans on a facts snapshot: the planner's ServerFacts from the snapshot, the model's files and
the GPUs, and the startup guard's note.

When no source gives the device pool (a server never started, nothing on record), the planner
estimates it from ``--model-path``'s files and the smallest GPU's memory
(``bot.planner._estimate``); what is missing for that is passed along, so the refusal names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from bot.agent.cmdline import Topology
from bot.agent.engine.guard import guard_note
from bot.agent.facts._model_files import ModelFiles, read_model_files
from bot.agent.facts._sources import model_hints, version_of
from bot.agent.facts._values import FactsSnapshot
from bot.agent.host.probe import GpuFacts
from bot.errors import PlanInputError, ProbeError
from bot.planner import (
    ChangeRequest,
    DeviceMemory,
    DevicePool,
    HostMemory,
    Plan,
    ServerFacts,
    StartSample,
    default_mem_fraction_static,
    make_plan,
)

__all__ = ["device_memory", "plan_on"]


def plan_on(
    snap: FactsSnapshot,
    request: ChangeRequest,
    headroom_gb: float,
    history: Sequence[StartSample],
) -> Plan:
    """The Plan for ``request`` on ``snap``. Raises the probe's or the backend's error when
    host RAM or the command line is unknown."""
    if snap.ram is None or snap.topology is None or snap.hicache is None:
        missing = [name for name, value in (("host RAM", snap.ram), ("the command line",
                   snap.topology)) if value is None]  # fmt: skip
        raise next(
            iter(snap.errors),
            ProbeError(f"cannot plan without {' and '.join(missing) or 'the HiCache flags'}"),
        )
    capacity = snap.capacity
    memory = HostMemory(
        available_bytes=snap.ram.available_bytes,
        server_held_bytes=snap.server_held_bytes,
        cgroup_limit_bytes=snap.ram.cgroup_limit_bytes,
    )
    hints = model_hints(snap.command or ())
    model = read_model_files(hints.model_path, snap.topology.tp, hints.kv_cache_dtype)
    pool = DevicePool(tokens=capacity.device_tokens, bytes_per_token=capacity.kv_bytes_per_token)
    device, device_missing = (None, None)
    if capacity.device_tokens is None:
        device, device_missing = device_memory(
            snap.topology, snap.gpus, model, hints.max_total_tokens
        )
    if capacity.kv_gib is not None:
        pool = DevicePool.from_log(capacity.device_tokens, capacity.kv_gib)
    draft = capacity.draft_kv_gib
    server = ServerFacts(
        ranks=capacity.ranks or 1,
        device_pool=pool,
        page_size=capacity.page_size,
        version=version_of(snap.server.version),
        host_tokens_per_rank_now=capacity.host_tokens_per_rank,
        radix_cache_disabled=snap.topology.disable_radix_cache,
        kv_shape=model.kv_shape,
        speculative=hints.speculative,
        device_pool_note=None
        if draft is None
        else f"a draft model's pool of {draft:.2f} GiB per rank beside it is not multiplied",
        device_pool_undecided=capacity.device_pool_undecided,
        host_extras=capacity.host_extras,
        device_pool_source=capacity.source,
        device_memory=device,
        device_pool_missing=device_missing,
        sized_by_sglang=snap.hicache.enabled
        and snap.hicache.ratio is None
        and snap.hicache.size_gb is None,
    )
    plan = make_plan(request, server, memory, headroom_gb=headroom_gb, history=history)
    return replace(plan, notes=(*plan.notes, guard_note(snap.guard, plan.budget_bytes)))


def device_memory(
    topology: Topology, gpus: GpuFacts, model: ModelFiles, max_total_tokens: int | None = None
) -> tuple[DeviceMemory | None, str | None]:
    """What the planner needs to estimate a device pool no start has logged: the smallest GPU's
    memory (NVML), the weights per rank and the fraction; else None and what is missing."""
    missing = list(model.missing)
    gpu_bytes = min((gpu.memory_total_bytes for gpu in gpus.gpus), default=0)
    if gpu_bytes <= 0:
        missing.append(f"GPU memory is unknown ({gpus.reason or 'NVML lists no GPU'})")
    if missing or model.weights_bytes is None:
        return None, "; ".join(missing) or "the weights' size is unknown"
    ranks = max(1, topology.tp * topology.pp)
    fraction = topology.mem_fraction_static
    try:
        return DeviceMemory(
            gpu_memory_bytes=gpu_bytes,
            weights_bytes_per_rank=model.weights_bytes // ranks,
            mem_fraction_static=fraction
            if fraction is not None
            else default_mem_fraction_static(gpu_bytes, topology.tp, topology.pp),
            fraction_given=fraction is not None,
            max_total_tokens=max_total_tokens,
        ), None
    except PlanInputError as exc:
        return None, str(exc)
