"""What Slack would show, as terminal text: the proposal, the live progress message, status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BAR_WIDTH = 20


def command(text: str) -> str:
    return f"\n\033[1m{text}\033[0m"


def plan_card(plan: Mapping[str, Any], host: str) -> str:
    """The proposal card: the figures, then the verdict sentence with its arithmetic."""
    lines = [f"Proposal for {host}: HiCache {plan['setting']}"]
    if plan.get("per_rank_gb") is not None:
        tokens = plan.get("per_rank_tokens")
        per_rank = f"{plan['per_rank_gb']:.2f} GB"
        if tokens:
            per_rank += f" ({tokens:,} tokens)"
        lines.append(f"  per rank  {per_rank}")
        per_rank_gb, total_gb = plan["per_rank_gb"], plan["total_gb"]
        lines.append(f"  all ranks {plan['ranks']} x {per_rank_gb:.2f} GB = {total_gb:.1f} GB")
    lines.append(
        f"  host RAM  {plan['available_gb']:.1f} GB available + {plan['server_held_gb']:.1f} GB "
        f"held by the running server = {plan['free_after_stop_gb']:.1f} GB after stop"
    )
    if plan.get("expected_startup_s"):
        lines.append(f"  startup   ~{plan['expected_startup_s'] / 60:.1f} min expected")
    verdict = "fits" if plan["verdict"] == "fits" else "REFUSED"
    lines.append(f"  {verdict}: {plan['reason']}")
    lines.append("  [Apply] [Cancel]" if plan["verdict"] == "fits" else "  (no Apply button)")
    return "\n".join(lines)


def worth_showing(event: Mapping[str, Any], last_shown: Mapping[str, Any]) -> bool:
    """A new phase, 5% more progress, or any message that is not a progress tick."""
    if not last_shown or event.get("phase") != last_shown.get("phase"):
        return True
    moved = float(event.get("progress") or 0) - float(last_shown.get("progress") or 0)
    ticking = event.get("phase") in ("load_weights", "cuda_graph")
    return moved >= 0.05 or not ticking


def progress_line(event: Mapping[str, Any], elapsed_s: float) -> str:
    progress = float(event.get("progress") or 0.0)
    filled = round(progress * BAR_WIDTH)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    minutes, seconds = divmod(int(elapsed_s), 60)
    return (
        f"  [{bar}] {progress * 100:3.0f}%  {event.get('phase', '')}: {event.get('message', '')}"
        f"   elapsed {minutes}:{seconds:02d}"
    )


def status_card(status: Mapping[str, Any]) -> str:
    server, config, capacity, ram = (
        status.get("server", {}),
        status.get("config", {}),
        status.get("capacity", {}),
        status.get("ram", {}),
    )
    gpus = status.get("gpus", {})
    devices = gpus.get("devices", [])
    busy = sum(1 for gpu in devices if gpu.get("processes"))
    host = status.get("host", {})
    lines = [
        f"Status of {host.get('name')}: server {server.get('state')} "
        f"(health {server.get('health_code')}, SGLang {server.get('version')})",
        f"  HiCache   {config.get('effective')}",
        f"  KV tokens device {_n(capacity.get('device_tokens'))}/rank, "
        f"host {_n(capacity.get('host_tokens_per_rank'))}/rank "
        f"({_gb(capacity.get('host_gb_per_rank'))} GB/rank x {capacity.get('ranks')} ranks)",
        f"  host RAM  {_gb(ram.get('total_gb'))} GB total, {_gb(ram.get('available_gb'))} GB "
        f"available, {_gb(ram.get('server_held_gb'))} GB held by the server",
        f"  GPUs      {len(devices)} ({busy} running the server)"
        if gpus.get("available")
        else f"  GPUs      unavailable: {gpus.get('reason')}",
    ]
    return "\n".join(lines)


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def _gb(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "?"
