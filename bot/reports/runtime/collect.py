"""Ask every host's agent at once and turn the answers into :class:`HostReport` values.

A host costs one ``GET /v1/status`` (which carries the server's ``/metrics`` figures) and one
``GET /v1/operations`` (plus the server's ``/metrics`` when ``[reports] metrics_urls`` names
it); hosts are asked in parallel, one thread each, so 20 hosts take about as long as the
slowest one. An agent that does not answer gives a report with ``problem`` set: the host is
listed as unreachable, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import httpx

from bot.agent_json import AgentOperation, AgentStatus
from bot.chat.agent_client import AgentClient
from bot.clock import Clock
from bot.errors import AgentError
from bot.prometheus import prometheus_samples, server_metrics
from bot.reports import (
    MEMORY_NOTICE_WINDOW,
    ConfigChange,
    GpuMemory,
    HostReport,
    LastOperation,
    ServerMetrics,
)
from bot.vocab import OperationState

__all__ = ["MetricsSource", "ServerMetricsSource", "collect_reports", "report_from"]

#: Operations read per host for the last operation and the chart's config changes.
OPERATIONS_READ = 50


class MetricsSource(Protocol):
    """SGLang's Prometheus figures for a host, or None when nobody exposes them."""

    def metrics(self, host: str, status: AgentStatus) -> ServerMetrics | None: ...


class ServerMetricsSource:
    """SGLang's figures for a host: from the server's own ``/metrics`` when ``[reports]
    metrics_urls`` names a URL for it (an override, for a server the agent cannot reach or an
    agent older than the figures), else those the agent's status carries (``metrics``, read
    from the server by the agent). Metrics are optional: nothing readable gives None."""

    def __init__(
        self,
        urls: Mapping[str, str],
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self._urls = dict(urls)
        self._http = httpx.Client(timeout=timeout_s, transport=transport)

    def metrics(self, host: str, status: AgentStatus) -> ServerMetrics | None:
        url = self._urls.get(host)
        if url is None:
            return status.metrics
        try:
            response = self._http.get(url)
        except httpx.HTTPError:
            return status.metrics
        if response.status_code != 200:
            return status.metrics
        return server_metrics(prometheus_samples(response.text)) or status.metrics

    def close(self) -> None:
        self._http.close()


def _label(operation: AgentOperation) -> str:
    if operation.plan is not None and operation.plan.setting:
        return operation.plan.setting
    return str(operation.kind)


def _changes(operations: Sequence[AgentOperation]) -> tuple[ConfigChange, ...]:
    ready = [
        op for op in operations if op.state is OperationState.READY and op.finished_at is not None
    ]
    return tuple(
        ConfigChange(at=op.finished_at, label=_label(op))
        for op in sorted(ready, key=lambda op: op.id)
        if op.finished_at is not None
    )


def _gpus(status: AgentStatus) -> tuple[GpuMemory, ...]:
    out: list[GpuMemory] = []
    for gpu in status.gpus:
        used, total = gpu.get("memory_used_gb"), gpu.get("memory_total_gb")
        out.append(
            GpuMemory(
                index=int(gpu.get("index", len(out))),
                used_gb=None if used is None else float(used),
                total_gb=None if total is None else float(total),
            )
        )
    return tuple(out)


def report_from(
    status: AgentStatus,
    operations: Sequence[AgentOperation],
    metrics: ServerMetrics | None,
    name: str,
    clock: Clock,
) -> HostReport:
    """The report of one host that answered (``operations`` newest first, as the agent lists)."""
    hicache_gb = None
    if status.host_gb_per_rank is not None and status.ranks:
        hicache_gb = status.host_gb_per_rank * status.ranks
    ready = [op for op in operations if op.state is OperationState.READY]
    last = operations[0] if operations else None
    now = clock.now()
    return HostReport(
        host=name,
        at=now,
        server_state=str(status.server_state),
        version=status.version,
        uptime_s=status.uptime_s,
        setting=status.effective,
        hicache=status.hicache,
        revision=ready[0].revision if ready else None,
        ram_total_gb=status.ram_total_gb,
        ram_available_gb=status.ram_available_gb,
        hicache_gb=hicache_gb,
        ranks=status.ranks,
        gpus=_gpus(status),
        device_tokens=status.device_tokens,
        host_tokens_per_rank=status.host_tokens_per_rank,
        metrics=metrics,
        last_operation=None
        if last is None
        else LastOperation(last.id, str(last.kind), str(last.state), last.actor, last.created_at),
        changes=_changes(operations),
        memory_notices=tuple(
            n for n in status.memory.notices if n.at >= now - MEMORY_NOTICE_WINDOW
        ),
        memory_below_floor=status.memory.below_floor,
    )


def _one(name: str, client: AgentClient, source: MetricsSource, clock: Clock) -> HostReport:
    try:
        status = client.status()
        operations = client.operations(OPERATIONS_READ)
    except AgentError as exc:
        return HostReport(host=name, at=clock.now(), problem=str(exc))
    return report_from(status, operations, source.metrics(name, status), name, clock)


def collect_reports(
    names: Sequence[str],
    clients: Mapping[str, AgentClient],
    source: MetricsSource,
    clock: Clock,
) -> tuple[HostReport, ...]:
    """Every named host's report, in ``names``' order, all asked at once."""
    if not names:
        return ()
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        return tuple(pool.map(lambda n: _one(n, clients[n], source, clock), names))
