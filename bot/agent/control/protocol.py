"""Server control: the one seam through which the agent starts, stops and reads the server.

Three backends implement ``ServerControl``: ``process`` (the agent launches the argv itself,
``bot.agent.control.process``), ``systemd`` (a drop-in on the unit, ``systemctl`` and
``journalctl``, ``bot.agent.control.systemd``) and ``docker`` (a container, replaced by a new
one for a new command, through the Docker Engine API, ``bot.agent.control.docker``). Each
persists what it needs in the state directory or the service manager, so a restarted agent
re-attaches to the server it started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.agent.host.probe import ServerCgroup
from bot.vocab import ServerState

__all__ = [
    "MARKER_ENV",
    "CommandEdit",
    "LogSource",
    "ServerControl",
    "ServerProcessState",
    "StopHow",
    "StopResult",
]

#: The variable in a started server's environment naming the start (``<operation id>:<start n>``),
#: so a restarted agent finds a server it spawned but had no time to record.
MARKER_ENV = "KIMI_OPS_OPERATION"

StopHow = Literal["not_running", "terminated", "killed"]


@dataclass(frozen=True)
class ServerProcessState:
    """The server process as the service manager sees it (not whether it serves yet).

    ``state`` is a ``ServerState``: running, starting (systemd is activating it), stopped (never
    started, stopped, or exited 0) or failed (exited non-zero or died on its own); each backend
    maps its own words onto these.
    ``exit_status`` is the last exit code when known; a signal is negative (-9 for SIGKILL) for
    the process backend's own child, and 137-style codes come through as the manager reports them.
    ``started_at`` is the Unix time the current or last process started.
    ``adopted``: the running server was started outside the agent (restarted by hand with the
    recorded command) and found by its command line; the agent treats it as its own.
    """

    state: ServerState
    main_pid: int | None = None
    exit_status: int | None = None
    started_at: float | None = None
    adopted: bool = False

    @property
    def running(self) -> bool:
        return self.state.running


@dataclass(frozen=True)
class CommandEdit:
    """``[agent] command`` edited since the recorded command was taken from it: the config's
    command now, and the one the recorded command was taken from."""

    configured: tuple[str, ...]
    taken_from: tuple[str, ...]


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

    def problem(self) -> str | None:
        """Why the output cannot be followed now (the log file moved or deleted), or None:
        the start is then followed from the server's endpoints alone."""
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

    def command_edit(self) -> CommandEdit | None:
        """``[agent] command`` when it was edited since the recorded command was taken from it
        (the process backend); None when it was not, or the backend does not start from it."""
        ...

    def adopt_configured(self) -> None:
        """Make ``[agent] command`` the recorded command (the one before kept as the previous);
        a BackendError where the command is not the config's (systemd: the unit's)."""
        ...

    def start(self, marker: str) -> None:
        """Start the server with the current command. Raises BackendError if it is running.

        ``marker`` names this start (``<operation id>:<start n>``). The backend records it before
        it spawns anything, so ``started(marker)`` can tell later whether the spawn happened."""
        ...

    def started(self, marker: str) -> bool:
        """Whether the most recent start is the one named ``marker`` (it may have exited since).

        A restarted agent asks this about a start it recorded but may not have seen through:
        True means that server exists (or existed) and is to be followed, never started again.
        """
        ...

    def stop(self, grace_s: float) -> StopResult:
        """SIGTERM the server, SIGKILL after ``grace_s`` seconds; return how it ended."""
        ...

    def kill(self) -> StopResult:
        """SIGKILL the server's whole tree at once, no grace, and wait until it is gone: for a
        start that must not go on (its ranks pinning more RAM than the host has)."""
        ...

    def status(self) -> ServerProcessState:
        """The server process's state now."""
        ...

    def cgroup(self) -> ServerCgroup:
        """Where the server's memory is charged: the running process, or the cgroup it will
        start in (a stopped unit's, or the agent's own for a server the agent spawns)."""
        ...

    def port_conflict(self, host: str, port: int) -> str | None:
        """Why a server started now could not bind ``host:port``, naming the process that holds
        it; None when the port is free or held by the running server (the stop frees it)."""
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
