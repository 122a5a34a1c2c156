"""Each rank's KV capacity: the device pool from the first source that has it, and the host pool.

The device pool's sources, in order:

1. ``/server_info`` of the running server (``server_info``);
2. the beginning of the last run's log, the file or the journal (``startup_log``): the pool
   line ``KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB``, also while stopped;
3. the agent's record of its last start (``last_start``).

With none of them the pool is unknown here, and a plan estimates it from the model's files
(``bot.agent.facts._planning``). The host pool is the last start's (logged or recorded), else
sized from the HiCache flags as SGLang will. The log also gives what no other source does: the
other host pools beside the KV one (a DSA indexer), a draft model's pool, and a hybrid
sliding-window model's two device pools (each of which gets a host pool).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from bot.agent.cmdline import HiCacheSetting, Topology
from bot.agent.facts._sources import (
    LOG_RUN_BYTES,
    LogPools,
    device_from_info,
    kv_gib_from_info,
    page_size,
    pools_of,
    report_of_text,
)
from bot.agent.facts._values import Capacity
from bot.errors import KimiOpsError
from bot.planner import (
    GB,
    DevicePool,
    DevicePoolSource,
    GiB,
    host_pool_for_ratio,
    host_pool_for_size,
    hybrid_pools_from_log,
)

__all__ = ["CapacityReader"]


class _RunLog(Protocol):
    """The server control's view of its last run's output."""

    def last_run_key(self) -> str | None: ...

    def last_run_log(self, max_bytes: int) -> str: ...


class _StartRecord(Protocol):
    def last_start_capacity(self) -> tuple[int, float | None, int | None, float | None] | None: ...


class CapacityReader:
    """Reads the capacity from its sources; keeps a finished run's log parse. Thread-safe."""

    def __init__(self, log: _RunLog, record: _StartRecord) -> None:
        self._log = log
        self._record = record
        self._log_cache: tuple[str, LogPools] | None = None
        self._lock = threading.Lock()

    def read(
        self,
        info: dict[str, Any] | None,
        hicache: HiCacheSetting | None,
        topology: Topology | None,
        errors: list[KimiOpsError],
        running: bool = False,
    ) -> Capacity:
        """The capacity from ``/server_info`` (``info``, None when the server does not answer),
        the last run's log and the agent's record; a failing record is added to ``errors``."""
        ranks = None if topology is None else topology.local_ranks
        pages = page_size(info, topology)
        tokens, per_token = device_from_info(info)
        kv_gib = kv_gib_from_info(info) if tokens is not None else None
        source = DevicePoolSource.SERVER_INFO if tokens is not None else None
        host_tokens: int | None = None
        host_gb: float | None = None
        logged = self._device_from_log(running)
        if tokens is None and logged.tokens is not None:
            tokens, per_token, kv_gib, source = (
                logged.tokens,
                logged.per_token,
                logged.kv_gib,
                DevicePoolSource.STARTUP_LOG,
            )
            host_tokens, host_gb = logged.host_tokens, logged.host_gb
        try:
            recorded = self._record.last_start_capacity()
        except KimiOpsError as exc:
            errors.append(exc)
            recorded = None
        if recorded is not None:
            rec_tokens, rec_per_token, rec_host_tokens, rec_host_gb = recorded
            if tokens is None and rec_tokens:
                tokens, per_token, source = (
                    int(rec_tokens),
                    rec_per_token,
                    DevicePoolSource.LAST_START,
                )
                if rec_per_token:
                    # Recorded as the logged GiB divided by the tokens: that GiB, as logged.
                    kv_gib = round(rec_per_token * tokens / GiB, 2)
            if host_gb is None:
                host_tokens, host_gb = rec_host_tokens or None, rec_host_gb or None
        if host_gb is None and hicache is not None and hicache.enabled:
            # No record of a start: size the pool from the flags, as SGLang will.
            pool = DevicePool(tokens=tokens, bytes_per_token=per_token)
            effective = hicache.effective()
            size = (
                host_pool_for_size(effective.size_gb, pool, pages)
                if effective.size_gb is not None
                else host_pool_for_ratio(effective.ratio or 0.0, pool, pages)
            )
            if size is not None:
                host_tokens, host_gb = size.tokens, round(size.bytes / GB, 2)
        swa = logged.sliding_window
        hybrid = None
        if swa is not None:
            hybrid = hybrid_pools_from_log(
                swa.full_tokens, swa.swa_tokens, swa.full_kv_gib, swa.swa_kv_gib, swa.kv_gib, pages
            )
        return Capacity(
            device_tokens=tokens,
            kv_bytes_per_token=None if per_token is None else round(per_token, 1),
            host_tokens_per_rank=host_tokens,
            host_gb_per_rank=host_gb,
            ranks=ranks,
            page_size=pages,
            source=source,
            kv_gib=kv_gib,
            host_extras=logged.host_extras,
            draft_kv_gib=logged.draft_kv_gib,
            device_pool_undecided=logged.undecided
            if source is DevicePoolSource.STARTUP_LOG
            else None,
            hybrid_pools=hybrid,
        )

    def _device_from_log(self, running: bool = False) -> LogPools:
        """Device pool and host pools per rank from the beginning of the server's last run (the
        log file or the journal): the device pool when the server is down, the draft pool and
        the extra host pools always.

        A parse is kept for the run only once it is complete (ready, failed, or its host pool
        logged and the server no longer running): those lines never change after that. A run
        still starting is read again on each call (at most LOG_RUN_BYTES), so a parse taken
        before its pool lines (a DSA indexer's comes after the KV host pool) is not kept.
        """
        nothing = LogPools()
        try:
            key = self._log.last_run_key()
            if key is None:
                return nothing
            with self._lock:
                cached = self._log_cache
            if cached is not None and cached[0] == key:
                return cached[1]
            report = report_of_text(self._log.last_run_log(LOG_RUN_BYTES))
            pools = pools_of(report)
            done = report.ready or report.failure is not None
            if pools.tokens is not None and (done or (pools.host_gb is not None and not running)):
                with self._lock:
                    self._log_cache = (key, pools)
        except KimiOpsError:
            return nothing
        return pools
