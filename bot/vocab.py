"""The words the agent, the store and the bot share: one ``StrEnum`` per kind of value.

Values only, no I/O: the agent's API models, the agent's state, the store's columns and the bot's
wording all derive from these lists, so a state or a kind is spelt in exactly one place. Each
member's value is what crosses the wire (the agent's JSON) and what the databases hold.

An operation, as the agent runs it::

    kind: resize | restart | rollback | live | reconfigure
    state: running -> (stalled <-> running) -> ready
                                            -> rolling_back -> rolled_back | failed
                                            -> failed

and each step it takes is an event whose ``phase`` is an :class:`EventPhase`.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "FINAL_OPERATION_STATES",
    "FINAL_ROLLOUT_STATES",
    "HOST_FAILURE_KINDS",
    "LOG_FAILURE_KINDS",
    "ApplyMode",
    "EventPhase",
    "FailureKind",
    "LiveChangeKind",
    "OperationKind",
    "OperationState",
    "RefusedBy",
    "ReplicaPhase",
    "RolloutState",
    "ServerState",
]


class OperationKind(StrEnum):
    """What an operation was asked to do."""

    RESIZE = "resize"  # write new HiCache flags, then restart
    RESTART = "restart"  # restart with the current command line
    ROLLBACK = "rollback"  # return to an earlier recorded command line, then restart
    LIVE = "live"  # change HiCache's storage tier through SGLang's runtime API, no restart
    RECONFIGURE = "reconfigure"  # write HiCache's storage or policy flags, then restart


class LiveChangeKind(StrEnum):
    """What a live change (SGLang's HiCache runtime API) does."""

    STORAGE_ATTACH = "storage_attach"
    STORAGE_DETACH = "storage_detach"
    STORAGE_CLEAR = "storage_clear"
    WRITE_POLICY = "write_policy"
    PREFETCH_POLICY = "prefetch_policy"


class ApplyMode(StrEnum):
    """How a change reaches the server: through the runtime API, by a restart, or not at all."""

    LIVE = "live"
    RESTART = "restart"
    REFUSED = "refused"


class OperationState(StrEnum):
    """Where an operation stands. ``ready``, ``failed`` and ``rolled_back`` are final."""

    RUNNING = "running"  # stopping, waiting for GPUs, starting, following the start
    STALLED = "stalled"  # the server process lives but its log has not moved for a while
    ROLLING_BACK = "rolling_back"  # the new config failed; the last ready one is being started
    READY = "ready"  # the server answers and reports the applied settings
    FAILED = "failed"  # it did not come up (and a rollback, if tried, failed too)
    ROLLED_BACK = "rolled_back"  # it did not come up; the last ready config runs again


#: States after which an operation changes no more.
FINAL_OPERATION_STATES: frozenset[OperationState] = frozenset(
    {OperationState.READY, OperationState.FAILED, OperationState.ROLLED_BACK}
)


class EventPhase(StrEnum):
    """The ``phase`` of an operation's event, in the order a start goes through them.

    ``init`` to ``ready`` are SGLang's own startup phases (read from its log); the others are the
    agent's steps around them and the operation's ends.
    """

    PLANNED = "planned"
    STOPPING = "stopping"
    WAITING_GPUS = "waiting_gpus"
    STARTING = "starting"
    INIT = "init"
    LOAD_WEIGHTS = "load_weights"
    KV_POOL = "kv_pool"
    CUDA_GRAPH = "cuda_graph"
    HOST_POOL = "host_pool"
    HTTP = "http"
    WARMUP = "warmup"
    WAITING_IDLE = "waiting_idle"  # a live change waits for no request running or queued
    APPLYING = "applying"  # a live change calls SGLang's runtime API
    VERIFYING = "verifying"
    READY = "ready"
    STALLED = "stalled"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


class ServerState(StrEnum):
    """The SGLang server process as the agent sees it (not whether it serves yet: see health).

    The systemd backend maps ``active`` / ``activating`` / ``inactive`` / ``failed`` onto these;
    the process backend reads its own child.
    """

    RUNNING = "running"  # the process lives (systemd: active)
    STARTING = "starting"  # systemd is starting it (activating)
    STOPPED = "stopped"  # not running: never started, stopped, or exited 0 (inactive)
    FAILED = "failed"  # exited non-zero or died on its own
    UNKNOWN = "unknown"  # the backend could not tell

    @property
    def running(self) -> bool:
        return self in (ServerState.RUNNING, ServerState.STARTING)


class FailureKind(StrEnum):
    """Why an operation's start failed.

    The first five and ``port_in_use`` are read from SGLang's own dying lines (most specific
    cause first; ``crash`` when the log names none); the rest are decided by the agent.
    """

    HOST_MEMORY = "host_memory"  # SGLang refused the host pool: not enough host RAM
    GPU_BUSY = "gpu_busy"  # GPUs held by other processes (unbalanced memory, or after the stop)
    GPU_MEMORY = "gpu_memory"  # GPU memory short: weights, KV pool or CUDA graphs
    OOM_KILLED = "oom_killed"  # a rank died of SIGKILL: usually the kernel's OOM killer
    CRASH = "crash"  # an exception or a dead rank with no specific cause in the log
    PORT_IN_USE = "port_in_use"  # a port the server binds is held by another process
    HOST_POOL_OVER_BUDGET = "host_pool_over_budget"  # the guard: logged host pool over the budget
    HOST_RAM_FLOOR = "host_ram_floor"  # the guard: available RAM fell below the floor
    CONFIG_MISMATCH = "config_mismatch"  # up, but /server_info reports other HiCache settings
    TIMEOUT = "timeout"  # not ready within the hard ceiling
    GPU_PROBE = "gpu_probe"  # NVML failed while waiting for the GPUs
    PROBE = "probe"  # another host fact (process table, RAM) could not be read
    BACKEND = "backend"  # systemd or the process backend refused to start or stop
    AGENT_ERROR = "agent_error"  # a bug or an unexpected error inside the agent
    UNKNOWN = "unknown"  # the process died or health failed and the log says nothing
    LIVE_REFUSED = "live_refused"  # a live change SGLang refused, or that did not show in GET


#: The kinds the startup-log parser can tell from SGLang's lines.
LOG_FAILURE_KINDS: frozenset[FailureKind] = frozenset(
    {
        FailureKind.HOST_MEMORY,
        FailureKind.GPU_BUSY,
        FailureKind.GPU_MEMORY,
        FailureKind.OOM_KILLED,
        FailureKind.CRASH,
        FailureKind.PORT_IN_USE,
    }
)

#: Causes outside the config: any config started on this host now dies of them again, so a
#: failed start of one of these kinds is never rolled back (the rollback would fail the same).
HOST_FAILURE_KINDS: frozenset[FailureKind] = frozenset(
    {FailureKind.PORT_IN_USE, FailureKind.GPU_BUSY}
)


class RefusedBy(StrEnum):
    """Which rule refused a plan, so each surface can word it (and the API can answer 422 for
    values SGLang itself would reject, 200 with the verdict for an over-budget change)."""

    SGLANG = "sglang"  # SGLang would reject the value: non-integer size, ratio <= 0, ...
    BUDGET = "budget"  # the host pool across all ranks does not fit the host's RAM budget
    MISSING_FACTS = "missing_facts"  # a figure the rule needs is unknown (the device pool)


class RolloutState(StrEnum):
    """Where a fleet rollout stands (:mod:`bot.fleet`); ``done``, ``stopped``, ``refused`` and
    ``cancelled`` are final."""

    PROPOSED = "proposed"  # planned on every replica, waiting for an Apply
    RUNNING = "running"
    DONE = "done"  # every replica changed
    STOPPED = "stopped"  # a replica failed: the rest were left as they were
    REFUSED = "refused"  # a plan did not fit: nothing was touched
    CANCELLED = "cancelled"  # withdrawn, expired or void before it started


FINAL_ROLLOUT_STATES: frozenset[RolloutState] = frozenset(
    {RolloutState.DONE, RolloutState.STOPPED, RolloutState.REFUSED, RolloutState.CANCELLED}
)


class ReplicaPhase(StrEnum):
    """Where one replica of a rollout stands."""

    WAITING = "waiting"  # not touched yet
    REMOVING = "removing"  # being taken out of the router
    DRAINING = "draining"  # out of the router, finishing the requests it runs
    RESIZING = "resizing"  # its agent restarts it on the new config
    ADDING = "adding"  # back in the router, waiting to be reported healthy
    DONE = "done"  # changed, back in the router and healthy
    ROLLED_BACK = "rolled_back"  # the new config failed; back on its old one
    FAILED = "failed"  # it did not come back at all
    UNCHANGED = "unchanged"  # the rollout stopped before it
