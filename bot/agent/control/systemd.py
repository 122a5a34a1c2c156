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

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bot.agent.control._atomic_file import read_json, write_atomic, write_json
from bot.agent.control._journal import JournalLogSource, journal_head
from bot.agent.control._systemctl_show import (
    CGROUP_PROPERTIES,
    SHOW_PROPERTIES,
    invocation_of,
    process_state,
    server_cgroup,
    show_exec_start,
)
from bot.agent.control._unit_file import (
    DROP_IN_NAME,
    drop_in_argv,
    drop_in_text,
    parse_exec_start,
    quote_argv,
)
from bot.agent.control.protocol import ServerProcessState, StopHow, StopResult
from bot.agent.host.probe import ServerCgroup
from bot.agent.write_hook import NO_WRITE_HOOK, WriteHook
from bot.clock import Clock
from bot.errors import BackendError

if TYPE_CHECKING:
    from bot.agent.config import AgentSettings

__all__ = ["DROP_IN_NAME", "JournalLogSource", "SystemdControl", "parse_exec_start", "quote_argv"]

START_RECORD_NAME = "50-kimi-ops-start.json"  # not *.conf: systemd does not read it
_POLL_S = 0.1
_KILL_WAIT_S = 30.0


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
        argv = drop_in_argv(self.drop_in)
        if argv:
            return argv
        argv = show_exec_start(self._run("show", "-p", "ExecStart", self._unit))
        if argv:
            return argv
        if self._fallback:
            return list(self._fallback)
        raise BackendError(
            f"cannot read the command of {self._unit}: no drop-in, no ExecStart from systemctl, "
            "and no [agent] command"
        )

    def write_command(self, argv: Sequence[str]) -> None:
        content = drop_in_text(argv)
        if not self.drop_in.exists():
            # Keep the unit's own command as the previous one, so a rollback can return to it.
            current = self.read_command()
            write_atomic(self._previous, drop_in_text(current).encode(), hook=self._hook)
            write_atomic(self.drop_in, content.encode(), hook=self._hook)
        else:
            write_atomic(self.drop_in, content.encode(), self._previous, hook=self._hook)
        self._run("daemon-reload")

    def previous_command(self) -> list[str] | None:
        return drop_in_argv(self._previous)

    def status(self) -> ServerProcessState:
        return process_state(self._show())

    def cgroup(self) -> ServerCgroup:
        return server_cgroup(self._show(CGROUP_PROPERTIES), self._unit)

    def _show(self, properties: str = SHOW_PROPERTIES) -> dict[str, str]:
        """The unit's properties the backend reads, in one ``systemctl show``."""
        return dict(
            line.partition("=")[::2]
            for line in self._run("show", "-p", properties, self._unit).splitlines()
            if "=" in line
        )

    @property
    def _start_record(self) -> Path:
        return self._dir / START_RECORD_NAME

    def start(self, marker: str) -> None:
        fields = self._show()
        current = process_state(fields)
        if current.running:
            raise BackendError(
                f"{self._unit} is already running (pid {current.main_pid}); stop it first"
            )
        before = invocation_of(fields.get("InvocationID", ""))
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
            self._sigkill()
        return StopResult(how, self._clock.monotonic() - began, self.status().exit_status)

    def kill(self) -> StopResult:
        began = self._clock.monotonic()
        if not self.status().running:
            return StopResult("not_running", 0.0, self.status().exit_status)
        self._sigkill()
        return StopResult("killed", self._clock.monotonic() - began, self.status().exit_status)

    def _sigkill(self) -> None:
        # systemctl kill signals every process of the unit's cgroup: the whole tree.
        self._run("kill", "--signal=SIGKILL", self._unit)
        if not self._wait_stopped(_KILL_WAIT_S):
            raise BackendError(f"{self._unit} still running {_KILL_WAIT_S:.0f} s after SIGKILL")

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
        return journal_head(argv, max_bytes)

    def _invocation_id(self) -> str:
        out = self._run("show", "-p", "InvocationID", self._unit)
        return invocation_of(out.strip().partition("=")[2])
