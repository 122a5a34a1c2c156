"""What ``systemctl show`` says of the unit: its process state, its invocation and its command.

``systemctl show -p ActiveState,...`` prints ``KEY=VALUE`` lines, e.g. ``ActiveState=failed``,
``MainPID=0``, ``ExecMainStatus=9``, ``ExecMainCode=2`` (killed by signal 9),
``ExecMainStartTimestamp=Sat 2026-11-29 07:20:01 UTC``,
``InvocationID=6f1c0c5e0a2f4bd6a4b3f0e1d2c3b4a5``; and for the memory cgroup,
``ControlGroup=/system.slice/sglang.service`` (empty while the unit is stopped: systemd removes
the cgroup), ``Slice=system.slice``, ``MemoryMax=68719476736`` and ``MemoryHigh=infinity``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from bot.agent.control.protocol import ServerProcessState
from bot.agent.host.probe import ServerCgroup
from bot.errors import BackendError
from bot.vocab import ServerState

__all__ = [
    "CGROUP_PROPERTIES",
    "SHOW_PROPERTIES",
    "invocation_of",
    "process_state",
    "server_cgroup",
    "show_exec_start",
    "slice_path",
]

# systemd's ActiveState, as the agent's ServerState; anything else (inactive, maintenance) is
# not running.
_ACTIVE_STATES = {
    "active": ServerState.RUNNING,
    "reloading": ServerState.RUNNING,
    "deactivating": ServerState.RUNNING,
    "refreshing": ServerState.RUNNING,
    "activating": ServerState.STARTING,
    "failed": ServerState.FAILED,
}
SHOW_PROPERTIES = (
    "ActiveState,SubState,MainPID,ExecMainStatus,ExecMainCode,ExecMainStartTimestamp,InvocationID"
)
CGROUP_PROPERTIES = "ActiveState,MainPID,ControlGroup,Slice,MemoryMax,MemoryHigh"
_CLD_KILLED, _CLD_DUMPED = "2", "3"  # ExecMainCode: the main process died of a signal


def process_state(fields: dict[str, str]) -> ServerProcessState:
    """The process state from ``systemctl show``'s properties."""
    state = _ACTIVE_STATES.get(fields.get("ActiveState", ""), ServerState.STOPPED)
    pid = int(fields.get("MainPID") or 0)
    status_text = fields.get("ExecMainStatus", "")
    exit_status = int(status_text) if status_text.lstrip("-").isdigit() else None
    if exit_status is not None and fields.get("ExecMainCode") in (_CLD_KILLED, _CLD_DUMPED):
        exit_status = -exit_status  # died of signal N: -N, as for a child process
    started = _parse_timestamp(fields.get("ExecMainStartTimestamp", ""))
    return ServerProcessState(state, pid or None, exit_status, started)


def server_cgroup(fields: dict[str, str], unit: str) -> ServerCgroup:
    """Where the unit's server is charged: its main process while it runs; else the cgroup
    systemd will create for it (``ControlGroup``, or its slice's path and the unit's name)
    with the unit's ``MemoryMax``/``MemoryHigh``."""
    state = process_state(fields)
    if state.running and state.main_pid is not None:
        return ServerCgroup(pid=state.main_pid)
    path = fields.get("ControlGroup", "").strip()
    if not path:
        path = f"{slice_path(fields.get('Slice', '').strip() or 'system.slice')}/{unit}"
        path = path.replace("//", "/")
    return ServerCgroup(
        planned_path=path,
        planned_max_bytes=_memory_limit(fields, "MemoryMax"),
        planned_high_bytes=_memory_limit(fields, "MemoryHigh"),
    )


def slice_path(name: str) -> str:
    """A slice's cgroup path: ``system.slice`` -> ``/system.slice``, ``a-b.slice`` ->
    ``/a.slice/a-b.slice`` (each dash opens a level), ``-.slice`` -> ``/``."""
    if name in ("", "-.slice"):
        return "/"
    stem = name.removesuffix(".slice")
    parts = stem.split("-")
    return "/" + "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def _memory_limit(fields: dict[str, str], name: str) -> int | None:
    value = fields.get(name, "").strip()
    if value in ("", "infinity", "[not set]"):
        return None
    if not value.isdigit():
        raise BackendError(f"systemctl show gave {name}={value!r}, expected bytes or infinity")
    return int(value)


def invocation_of(value: str) -> str:
    """An InvocationID as systemd prints it (32 hex digits), or '' when unset."""
    value = value.strip()
    return value if all(c in "0123456789abcdef" for c in value) else ""


def show_exec_start(text: str) -> list[str] | None:
    """argv from ``systemctl show -p ExecStart``:
    ``ExecStart={ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m sglang.launch_server ; ...}``
    (systemd joins the words with spaces, so an argument containing a space cannot be told)."""
    marker = "argv[]="
    start = text.find(marker)
    if start < 0:
        return None
    end = text.find(" ;", start)
    words = text[start + len(marker) : end if end >= 0 else None].split()
    return words or None


def _parse_timestamp(value: str) -> float | None:
    """``Sat 2026-11-29 07:20:01 UTC`` (or ``@1764400801``) as Unix time; None if unset."""
    value = value.strip()
    if not value or value == "n/a":
        return None
    if value.startswith("@"):
        return float(value[1:])
    parts = value.split()
    try:
        moment = datetime.strptime(" ".join(parts[:3]), "%a %Y-%m-%d %H:%M:%S")
    except (ValueError, IndexError):
        return None
    if len(parts) > 3 and parts[3] == "UTC":
        return moment.replace(tzinfo=UTC).timestamp()
    return time.mktime(moment.timetuple())  # the host's local zone, as systemctl printed it
