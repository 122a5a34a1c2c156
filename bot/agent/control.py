"""Server control: the one seam through which the agent starts, stops and reads the server.

Two backends implement ``ServerControl``: ``process`` (the agent launches the argv itself,
``bot.agent._process_backend``) and ``systemd`` (a drop-in on the unit, ``systemctl`` and
``journalctl``, ``bot.agent._systemd_backend``). Both persist what they need in the state
directory or the service manager, so a restarted agent re-attaches to the server it started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from bot.clock import Clock, SystemClock
from bot.errors import ConfigError

if TYPE_CHECKING:
    from bot.agent.config import AgentSettings

__all__ = [
    "LogSource",
    "ServerControl",
    "ServerProcessState",
    "ServerStateName",
    "StopHow",
    "StopResult",
    "make_control",
]

ServerStateName = Literal["active", "activating", "inactive", "failed"]
StopHow = Literal["not_running", "terminated", "killed"]


@dataclass(frozen=True)
class ServerProcessState:
    """The server process as the service manager sees it (not whether it serves yet).

    ``state``: "active" (running), "activating" (systemd is starting it), "inactive" (not
    running: never started, stopped, or exited 0), "failed" (exited non-zero or died on its own).
    ``exit_status`` is the last exit code when known; a signal is negative (-9 for SIGKILL) for
    the process backend's own child, and 137-style codes come through as the manager reports them.
    ``started_at`` is the Unix time the current or last process started.
    """

    state: ServerStateName
    main_pid: int | None = None
    exit_status: int | None = None
    started_at: float | None = None

    @property
    def running(self) -> bool:
        return self.state in ("active", "activating")


@dataclass(frozen=True)
class StopResult:
    """How a stop ended: "not_running" (nothing to stop), "terminated" (SIGTERM sufficed) or
    "killed" (SIGKILL after the grace period), how long it took, and the exit status if known."""

    how: StopHow
    duration_s: float
    exit_status: int | None = None


class LogSource(Protocol):
    """New server output, read without blocking."""

    def read_new(self) -> str:
        """Text written since the last call ("" if none); may end mid-line."""
        ...

    def close(self) -> None:
        """Release the file or subprocess behind the source."""
        ...


class ServerControl(Protocol):
    """What the agent does to the server. Errors are ``BackendError`` (or ``CommandLineError``)."""

    name: str

    def read_command(self) -> list[str]:
        """The server's current launch argv."""
        ...

    def write_command(self, argv: Sequence[str]) -> None:
        """Make ``argv`` the launch command for the next start, atomically, keeping the
        previous command (see ``previous_command``). Does not restart anything."""
        ...

    def previous_command(self) -> list[str] | None:
        """The command before the last ``write_command``, or None if there was none."""
        ...

    def start(self) -> None:
        """Start the server with the current command. Raises BackendError if it is running."""
        ...

    def stop(self, grace_s: float) -> StopResult:
        """SIGTERM the server, SIGKILL after ``grace_s`` seconds; return how it ended."""
        ...

    def status(self) -> ServerProcessState:
        """The server process's state now."""
        ...

    def open_log(self, since: float | None = None) -> LogSource:
        """A source of server output: from the start at Unix time ``since`` when given (use the
        ``started_at`` of ``status()`` to re-read the current run after an agent restart),
        otherwise only what is written from now on."""
        ...

    def last_run_key(self) -> str | None:
        """What identifies the most recent run (it changes with a new run, and may change as
        its startup output grows), so a reader can cache a complete parse; None when there is
        none."""
        ...

    def last_run_log(self, max_bytes: int) -> str:
        """The beginning of the most recent run's output, at most ``max_bytes`` (its startup
        lines, which give the device and host pools after the server stopped); '' if none."""
        ...


def make_control(settings: AgentSettings, clock: Clock | None = None) -> ServerControl:
    """The backend ``[agent] backend`` names."""
    used_clock = clock if clock is not None else SystemClock()
    if settings.backend == "process":
        from bot.agent._process_backend import ProcessControl

        return ProcessControl.from_settings(settings, used_clock)
    if settings.backend == "systemd":
        from bot.agent._systemd_backend import SystemdControl

        return SystemdControl.from_settings(settings, used_clock)
    raise ConfigError(f"[agent] backend is {settings.backend!r}; expected one of: process, systemd")
