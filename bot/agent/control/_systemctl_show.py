"""What ``systemctl show`` says of the unit: its process state, its invocation and its command.

``systemctl show -p ActiveState,...`` prints ``KEY=VALUE`` lines, e.g. ``ActiveState=failed``,
``MainPID=0``, ``ExecMainStatus=9``, ``ExecMainCode=2`` (killed by signal 9),
``ExecMainStartTimestamp=Sat 2026-11-29 07:20:01 UTC``,
``InvocationID=6f1c0c5e0a2f4bd6a4b3f0e1d2c3b4a5``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from bot.agent.control.protocol import ServerProcessState
from bot.vocab import ServerState

__all__ = ["SHOW_PROPERTIES", "invocation_of", "process_state", "show_exec_start"]

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
