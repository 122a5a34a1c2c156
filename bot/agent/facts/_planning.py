"""Plans on a facts snapshot: the planner's ServerFacts from the snapshot, the model's files and
the GPUs, and the startup guard's note.

The command line's other host-pool flags (PD disaggregation, decode offload, the host memory
mode, the storage backend and Mooncake's segment) become the planner's ``HostPoolFlags``
(``host_pool_flags``), so every host pool SGLang allocates is planned.

When no source gives the device pool (a server never started, nothing on record), the planner
estimates it from ``--model-path``'s files and the smallest GPU's memory
(``bot.planner._estimate``); what is missing for that is passed along, so the refusal names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from bot.agent.cmdline import HostPoolArgs, Topology, read_host_pool_args
from bot.agent.engine.guard import guard_note
from bot.agent.facts._model_files import ModelFiles, read_model_files
from bot.agent.facts._sources import model_hints, version_of
from bot.agent.facts._values import FactsSnapshot
from bot.agent.host.probe import GpuFacts
from bot.errors import CommandLineError, PlanInputError, ProbeError
from bot.planner import (
    SWA_POOL,
    ChangeRequest,
    DeviceMemory,
    DevicePool,
    HostMemory,
    HostPoolFlags,
    MooncakeSegment,
    Plan,
    ServerFacts,
    StartSample,
    StorageBackend,
    default_mem_fraction_static,
    make_plan,
    mooncake_segment,
    parse_extra_config,
)

__all__ = ["device_memory", "host_pool_flags", "plan_on"]


def plan_on(
    snap: FactsSnapshot,
    request: ChangeRequest,
    headroom_gb: float,
    history: Sequence[StartSample],
    server_environ: Mapping[str, str] | None = None,
) -> Plan:
    """The Plan for ``request`` on ``snap``. Raises the probe's or the backend's error when
    host RAM or the command line is unknown. ``server_environ`` is the server's environment
    when known (Mooncake may be configured there)."""
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
        cgroup_headroom_bytes=snap.ram.cgroup_headroom_bytes,
        cgroup_path=snap.ram.cgroup_path,
        total_bytes=snap.ram.total_bytes,
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
        # A hybrid model's logged sliding-window host pool is planned as its own pool.
        host_extras=tuple(
            extra
            for extra in capacity.host_extras
            if capacity.hybrid_pools is None or extra.name != SWA_POOL
        ),
        device_pool_source=capacity.source,
        device_memory=device,
        device_pool_missing=device_missing,
        host_pool_flags=_flags_of(snap, server_environ),
        hybrid_pools=capacity.hybrid_pools,
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


def _flags_of(snap: FactsSnapshot, environ: Mapping[str, str] | None) -> HostPoolFlags:
    assert snap.topology is not None
    try:
        args = read_host_pool_args(snap.command or ())
    except CommandLineError as exc:
        # A flag the planner cannot read is a host-memory mode it does not know: refused.
        return HostPoolFlags(host_memory_mode=f"unreadable ({exc})")
    return host_pool_flags(args, snap.topology, environ)


def host_pool_flags(
    args: HostPoolArgs,
    topology: Topology,
    environ: Mapping[str, str] | None,
    read_file: Callable[[str], str] = lambda path: Path(path).read_text(encoding="utf-8"),
) -> HostPoolFlags:
    """The planner's view of the command line's host-pool flags; for Mooncake, its segment as
    SGLang resolves it from the extra config, the config file or ``environ`` (the server's
    environment: None when unknown, and then only the extra config can give it)."""
    attention_tp = topology.tp // topology.dp if topology.dp_attention else topology.tp
    mooncake: MooncakeSegment | None = None
    if args.storage_backend == StorageBackend.MOONCAKE:
        mooncake = _mooncake(args.storage_extra_config, environ, read_file)
    return HostPoolFlags(
        disaggregation_mode=args.disaggregation_mode,
        decode_offload=args.decode_offload,
        retraction_backup=args.retraction_backup,
        decode_radix_cache=args.decode_radix_cache,
        priority_preemption=args.priority_preemption,
        host_memory_mode=args.host_memory_mode,
        storage_backend=args.storage_backend,
        mooncake=mooncake,
        storage_ranks=max(1, attention_tp) * max(1, topology.pp),
    )


def _mooncake(
    extra_text: str | None,
    environ: Mapping[str, str] | None,
    read_file: Callable[[str], str],
) -> MooncakeSegment:
    try:
        extra = parse_extra_config(extra_text, read_file) if extra_text else {}
    except (ValueError, OSError) as exc:
        return MooncakeSegment(None, "--hicache-storage-backend-extra-config", problem=str(exc))
    configured = (
        extra.get("master_server_address") is not None
        or extra.get("client_server_address") is not None
    )
    if not configured and environ is None:
        return MooncakeSegment(
            None,
            "the server's environment",
            problem="the extra config names no master or client address, so SGLang reads "
            "Mooncake from the server's environment, which the agent does not see; give "
            "master_server_address and global_segment_size in "
            "--hicache-storage-backend-extra-config",
        )
    env = environ or {}
    config_file = None
    path = env.get("SGLANG_HICACHE_MOONCAKE_CONFIG_PATH")
    if not configured and path is not None:
        try:
            config_file = parse_extra_config(read_file(path))
        except (ValueError, OSError):
            config_file = None
    return mooncake_segment(extra, env, config_file)
