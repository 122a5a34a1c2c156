"""The systemd backend: the server is a unit; the agent changes its ExecStart through a drop-in.

``<unit_dir>/<unit>.d/50-kimi-ops-hicache.conf``::

    [Service]
    ExecStart=
    ExecStart="/usr/bin/python3" "-m" "sglang.launch_server" "--tp-size" "8" "--hicache-ratio" "4"

The empty ``ExecStart=`` resets the unit's own line; the previous drop-in is kept beside it as
``50-kimi-ops-hicache.conf.previous`` (systemd reads only ``*.conf``). Then ``systemctl
daemon-reload``; ``systemctl restart``/``stop``/``kill``/``show``; logs from ``journalctl -u``.

A start's marker is the unit's invocation: before ``systemctl restart`` the backend writes the
marker and the invocation ID it replaces to ``50-kimi-ops-start.json`` beside the drop-in, so
``started(marker)`` is true once systemd runs (or ran) a newer invocation.
"""

from __future__ import annotations

import codecs
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bot.agent.control._atomic_file import read_json, write_atomic, write_json
from bot.agent.control.protocol import ServerProcessState, StopHow, StopResult
from bot.agent.write_hook import NO_WRITE_HOOK, WriteHook
from bot.clock import Clock
from bot.errors import BackendError
from bot.vocab import ServerState

if TYPE_CHECKING:
    from bot.agent.config import AgentSettings

__all__ = ["DROP_IN_NAME", "JournalLogSource", "SystemdControl", "parse_exec_start", "quote_argv"]

DROP_IN_NAME = "50-kimi-ops-hicache.conf"
START_RECORD_NAME = "50-kimi-ops-start.json"  # not *.conf: systemd does not read it
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
_SHOW = (
    "ActiveState,SubState,MainPID,ExecMainStatus,ExecMainCode,ExecMainStartTimestamp,InvocationID"
)
_POLL_S = 0.1
_KILL_WAIT_S = 30.0
_CLD_KILLED, _CLD_DUMPED = "2", "3"  # ExecMainCode: the main process died of a signal


def quote_argv(argv: Sequence[str]) -> str:
    """One ExecStart value: each argument double-quoted; ``\\`` and ``"`` escaped, ``$`` and
    ``%`` doubled so systemd neither expands variables nor specifiers in them."""
    quoted = []
    for arg in argv:
        if "\n" in arg or "\0" in arg:
            raise BackendError(f"argument {arg!r} cannot be written to a unit file (newline/NUL)")
        escaped = arg.replace("\\", "\\\\").replace('"', '\\"')
        quoted.append('"' + escaped.replace("$", "$$").replace("%", "%%") + '"')
    return " ".join(quoted)


def parse_exec_start(value: str) -> list[str]:
    """The argv of an ExecStart value (the inverse of ``quote_argv``; also plain words)."""
    argv: list[str] = []
    current: list[str] = []
    quote: str | None = None
    in_word = False
    i = 0
    while i < len(value):
        ch = value[i]
        if quote is None and ch in " \t":
            if in_word:
                argv.append("".join(current))
                current, in_word = [], False
        elif quote is None and ch in "\"'":
            quote, in_word = ch, True
        elif quote is not None and ch == quote:
            quote = None
        elif ch == "\\" and i + 1 < len(value):
            i += 1
            current.append(value[i])
            in_word = True
        elif ch in "$%" and value[i + 1 : i + 2] == ch:
            i += 1
            current.append(ch)
            in_word = True
        else:
            current.append(ch)
            in_word = True
        i += 1
    if quote is not None:
        raise BackendError(f"unterminated quote in ExecStart={value}")
    if in_word:
        argv.append("".join(current))
    return argv


def _drop_in_argv(path: Path) -> list[str] | None:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BackendError(f"cannot read {path}: {exc}") from exc
    values = [line.partition("=")[2].strip() for line in lines if line.startswith("ExecStart=")]
    values = [value for value in values if value]
    return parse_exec_start(values[-1]) if values else None


def _show_exec_start(text: str) -> list[str] | None:
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


class JournalLogSource:
    """``journalctl -u <unit> -f -o cat`` in a subprocess, drained by a reader thread."""

    def __init__(self, argv: list[str]) -> None:
        try:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
        except OSError as exc:
            raise BackendError(f"cannot run {argv[0]!r}: {exc}") from exc
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="journal-reader", daemon=True)
        self._thread.start()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _drain(self) -> None:
        stream = self._process.stdout
        assert stream is not None
        while chunk := os.read(stream.fileno(), 65536):
            with self._lock:
                self._chunks.append(chunk)

    def read_new(self) -> str:
        with self._lock:
            data, self._chunks = b"".join(self._chunks), []
        return self._decoder.decode(data)

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._thread.join(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()


class SystemdControl:
    """``ServerControl`` over a systemd unit."""

    name = "systemd"

    def __init__(
        self,
        unit: str,
        unit_dir: Path,
        fallback_command: Sequence[str],
        clock: Clock,
        systemctl: str = "systemctl",
        journalctl: str = "journalctl",
        write_hook: WriteHook = NO_WRITE_HOOK,
    ) -> None:
        self._unit = unit
        self._dir = unit_dir / f"{unit}.d"
        self._fallback = list(fallback_command)
        self._clock = clock
        self._systemctl = systemctl
        self._journalctl = journalctl
        self._hook = write_hook

    @classmethod
    def from_settings(
        cls, settings: AgentSettings, clock: Clock, write_hook: WriteHook = NO_WRITE_HOOK
    ) -> SystemdControl:
        return cls(
            settings.unit,
            settings.unit_dir,
            settings.command,
            clock,
            settings.systemctl,
            settings.journalctl,
            write_hook,
        )

    @property
    def drop_in(self) -> Path:
        return self._dir / DROP_IN_NAME

    @property
    def _previous(self) -> Path:
        return self._dir / (DROP_IN_NAME + ".previous")

    def _run(self, *args: str, timeout: float = 120.0) -> str:
        argv = [self._systemctl, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendError(f"{' '.join(argv)} failed: {exc}") from exc
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()
            raise BackendError(f"{' '.join(argv)} exited {done.returncode}: {detail}")
        return done.stdout

    def read_command(self) -> list[str]:
        argv = _drop_in_argv(self.drop_in)
        if argv:
            return argv
        argv = _show_exec_start(self._run("show", "-p", "ExecStart", self._unit))
        if argv:
            return argv
        if self._fallback:
            return list(self._fallback)
        raise BackendError(
            f"cannot read the command of {self._unit}: no drop-in, no ExecStart from systemctl, "
            "and no [agent] command"
        )

    def write_command(self, argv: Sequence[str]) -> None:
        content = _drop_in(argv)
        if not self.drop_in.exists():
            # Keep the unit's own command as the previous one, so a rollback can return to it.
            current = self.read_command()
            write_atomic(self._previous, _drop_in(current).encode(), hook=self._hook)
            write_atomic(self.drop_in, content.encode(), hook=self._hook)
        else:
            write_atomic(self.drop_in, content.encode(), self._previous, hook=self._hook)
        self._run("daemon-reload")

    def previous_command(self) -> list[str] | None:
        return _drop_in_argv(self._previous)

    def status(self) -> ServerProcessState:
        return _process_state(self._show())

    def _show(self) -> dict[str, str]:
        """The unit's properties the backend reads, in one ``systemctl show``."""
        return dict(
            line.partition("=")[::2]
            for line in self._run("show", "-p", _SHOW, self._unit).splitlines()
            if "=" in line
        )

    @property
    def _start_record(self) -> Path:
        return self._dir / START_RECORD_NAME

    def start(self, marker: str) -> None:
        fields = self._show()
        current = _process_state(fields)
        if current.running:
            raise BackendError(
                f"{self._unit} is already running (pid {current.main_pid}); stop it first"
            )
        before = _invocation_of(fields.get("InvocationID", ""))
        write_json(self._start_record, {"marker": marker, "before": before}, hook=self._hook)
        self._run("restart", self._unit)

    def started(self, marker: str) -> bool:
        record = read_json(self._start_record)
        if not isinstance(record, dict) or record.get("marker") != marker:
            return False
        now = self._invocation_id()
        return bool(now) and now != record.get("before")

    def stop(self, grace_s: float) -> StopResult:
        began = self._clock.monotonic()
        if not self.status().running:
            return StopResult("not_running", 0.0, self.status().exit_status)
        how: StopHow = "terminated"
        self._run("stop", "--no-block", self._unit)
        if not self._wait_stopped(grace_s):
            how = "killed"
            self._run("kill", "--signal=SIGKILL", self._unit)
            if not self._wait_stopped(_KILL_WAIT_S):
                raise BackendError(f"{self._unit} still running {_KILL_WAIT_S:.0f} s after SIGKILL")
        return StopResult(how, self._clock.monotonic() - began, self.status().exit_status)

    def kill(self) -> StopResult:
        began = self._clock.monotonic()
        if not self.status().running:
            return StopResult("not_running", 0.0, self.status().exit_status)
        # systemctl kill signals every process of the unit's cgroup: the whole tree.
        self._run("kill", "--signal=SIGKILL", self._unit)
        if not self._wait_stopped(_KILL_WAIT_S):
            raise BackendError(f"{self._unit} still running {_KILL_WAIT_S:.0f} s after SIGKILL")
        return StopResult("killed", self._clock.monotonic() - began, self.status().exit_status)

    def _wait_stopped(self, timeout_s: float) -> bool:
        deadline = self._clock.monotonic() + timeout_s
        while self.status().running:
            if self._clock.monotonic() >= deadline:
                return False
            self._clock.sleep(_POLL_S)
        return True

    def open_log(self, since: float | None = None) -> JournalLogSource:
        """The journal of the unit's current run when ``since`` is given (its start time), else
        from now on.

        The run is selected by its invocation ID (systemd >= 232): ``--since`` has whole-second
        precision, so the previous run's last lines (a failed start's traceback) written in the
        second the new run began would otherwise read as the new run's.
        """
        argv = [self._journalctl, "-f", "-o", "cat"]
        if since is None:
            return JournalLogSource([*argv, "-u", self._unit, "-n", "0"])
        invocation = self._invocation_id()
        if invocation:
            return JournalLogSource([*argv, f"_SYSTEMD_INVOCATION_ID={invocation}"])
        return JournalLogSource([*argv, "-u", self._unit, "--since", f"@{int(since)}"])

    def last_run_key(self) -> str | None:
        return self._invocation_id() or None

    def last_run_log(self, max_bytes: int) -> str:
        """The first ``max_bytes`` of the last run's journal (its startup), read by invocation
        ID; '' when systemd has no run of the unit on record."""
        invocation = self._invocation_id()
        if not invocation:
            return ""
        argv = [self._journalctl, "-o", "cat", "--no-pager", f"_SYSTEMD_INVOCATION_ID={invocation}"]
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
        except OSError as exc:
            raise BackendError(f"cannot run {argv[0]!r}: {exc}") from exc
        assert process.stdout is not None
        with process.stdout:
            data = process.stdout.read(max_bytes)  # a run of weeks: its beginning is enough
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=10)
        return data.decode("utf-8", errors="replace")

    def _invocation_id(self) -> str:
        out = self._run("show", "-p", "InvocationID", self._unit)
        return _invocation_of(out.strip().partition("=")[2])


def _drop_in(argv: Sequence[str]) -> str:
    return f"[Service]\nExecStart=\nExecStart={quote_argv(argv)}\n"


def _process_state(fields: dict[str, str]) -> ServerProcessState:
    """The process state from ``systemctl show``'s properties."""
    state = _ACTIVE_STATES.get(fields.get("ActiveState", ""), ServerState.STOPPED)
    pid = int(fields.get("MainPID") or 0)
    status_text = fields.get("ExecMainStatus", "")
    exit_status = int(status_text) if status_text.lstrip("-").isdigit() else None
    if exit_status is not None and fields.get("ExecMainCode") in (_CLD_KILLED, _CLD_DUMPED):
        exit_status = -exit_status  # died of signal N: -N, as for a child process
    started = _parse_timestamp(fields.get("ExecMainStartTimestamp", ""))
    return ServerProcessState(state, pid or None, exit_status, started)


def _invocation_of(value: str) -> str:
    """An InvocationID as systemd prints it (32 hex digits), or '' when unset."""
    value = value.strip()
    return value if all(c in "0123456789abcdef" for c in value) else ""
