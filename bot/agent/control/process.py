"""The process backend: the agent launches the server's argv itself (hosts without systemd,
tests and the demo).

State in ``state_dir``:

- ``command.json`` / ``command.previous.json``: the launch argv (initialised from
  ``[agent] command``), rewritten atomically;
- ``server.json``: the last start: its marker, pid, psutil create time, start time, the log
  file's size before the start, whether the agent asked it to stop, and its exit status once seen.

The start is recorded *before* the spawn, with its marker and no pid; the child carries the marker
in its environment (``KIMI_OPS_OPERATION=<operation id>:<start n>``, beside
``KIMI_OPS_STATE_DIR``, so two agents on one host never take each other's) and leads its own
process group. An agent killed between the spawn and recording the pid finds its child again by that
marker (psutil reads a process's environment on Linux) and adopts it, instead of waiting for the
GPUs its own new server holds. A restarted agent finds a recorded server by pid *and* create time
(a recycled pid is another process), so it never starts a second server beside a running one.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from bot.agent.control._atomic_file import read_json, write_json
from bot.agent.control.protocol import MARKER_ENV, ServerProcessState, StopHow, StopResult
from bot.agent.host.probe import ServerCgroup
from bot.agent.write_hook import NO_WRITE_HOOK, WriteHook
from bot.clock import Clock
from bot.errors import BackendError
from bot.vocab import ServerState

if TYPE_CHECKING:
    from bot.agent.config import AgentSettings

__all__ = ["STATE_DIR_ENV", "FileLogSource", "ProcessControl"]

# After SIGKILL the kernel still has to tear the process down (and unpin its memory).
_KILL_WAIT_S = 30.0
_POLL_S = 0.05
# Beside the marker in the server's environment: which agent started it.
STATE_DIR_ENV = "KIMI_OPS_STATE_DIR"
# The facts service reads this much of a run's start (its LOG_RUN_BYTES): beyond, the key holds.
_RUN_KEY_BYTES = 8 * 1024 * 1024


class FileLogSource:
    """Reads what is appended to a log file from a byte offset, never blocking.

    The file is opened for each read (nothing is held open between polls); a file that shrank
    (rotated or truncated) is read again from its beginning.
    """

    def __init__(self, path: Path, offset: int) -> None:
        self._path = path
        self._offset = offset
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._closed = False

    def read_new(self) -> str:
        if self._closed:
            return ""
        try:
            with self._path.open("rb") as handle:
                if os.fstat(handle.fileno()).st_size < self._offset:
                    self._offset = 0
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise BackendError(f"cannot read the server log {self._path}: {exc}") from exc
        self._offset += len(data)
        return self._decoder.decode(data)

    def close(self) -> None:
        self._closed = True


@dataclass
class _Run:
    """``server.json``; ``pid`` is None between recording a start and seeing its child."""

    pid: int | None
    create_time: float
    started_at: float
    log_offset: int
    stop_requested: bool = False
    exit_status: int | None = None
    marker: str | None = None  # absent from records written before markers existed

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ProcessControl:
    """``ServerControl`` over a child process in its own session (process group)."""

    name = "process"

    def __init__(
        self,
        state_dir: Path,
        initial_command: Sequence[str],
        log_file: Path,
        env: Mapping[str, str],
        clock: Clock,
        write_hook: WriteHook = NO_WRITE_HOOK,
    ) -> None:
        self._state_dir = state_dir
        self._initial = list(initial_command)
        self._log_file = log_file
        self._env = dict(env)
        self._clock = clock
        self._hook = write_hook
        self._child: subprocess.Popen[bytes] | None = None

    @classmethod
    def from_settings(
        cls, settings: AgentSettings, clock: Clock, write_hook: WriteHook = NO_WRITE_HOOK
    ) -> ProcessControl:
        return cls(
            settings.state_dir, settings.command, settings.log_file, settings.env, clock, write_hook
        )

    # -- command -----------------------------------------------------------------------------

    @property
    def _command_path(self) -> Path:
        return self._state_dir / "command.json"

    @property
    def _previous_path(self) -> Path:
        return self._state_dir / "command.previous.json"

    @property
    def _run_path(self) -> Path:
        return self._state_dir / "server.json"

    def read_command(self) -> list[str]:
        stored = read_json(self._command_path)
        if stored is None:
            if not self._initial:
                raise BackendError("no server command: set [agent] command")
            write_json(self._command_path, {"argv": self._initial}, hook=self._hook)
            return list(self._initial)
        return _argv_from(stored, self._command_path)

    def write_command(self, argv: Sequence[str]) -> None:
        self.read_command()  # make sure there is a current command to keep as the previous one
        write_json(self._command_path, {"argv": list(argv)}, self._previous_path, hook=self._hook)

    def previous_command(self) -> list[str] | None:
        stored = read_json(self._previous_path)
        return None if stored is None else _argv_from(stored, self._previous_path)

    # -- process -----------------------------------------------------------------------------

    def _load_run(self) -> _Run | None:
        """The last start; a start recorded without its pid gets it here if its child is found
        by marker (the agent died between the spawn and recording the pid)."""
        stored = read_json(self._run_path)
        if stored is None:
            return None
        try:
            run = _Run(**stored)
        except TypeError as exc:
            raise BackendError(f"{self._run_path} is not a server record: {exc}") from exc
        if run.pid is None and run.marker is not None:
            found = _find_by_marker(run.marker, str(self._state_dir))
            if found is not None:
                run.pid, run.create_time = found
                self._save_run(run)
        return run

    def _save_run(self, run: _Run) -> None:
        write_json(self._run_path, run.to_json(), hook=self._hook)

    def _alive(self, run: _Run) -> bool:
        """Whether the recorded process is still running; records its exit status if seen."""
        if run.pid is None:
            return False  # recorded, never spawned (or gone before anyone saw it)
        if self._child is not None and self._child.pid == run.pid:
            code = self._child.poll()
            if code is None:
                return True
            if run.exit_status is None:
                run.exit_status = code
                self._save_run(run)
            return False
        try:
            process = psutil.Process(run.pid)
            same = abs(process.create_time() - run.create_time) < 0.01
            return same and process.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False

    def status(self) -> ServerProcessState:
        run = self._load_run()
        if run is None or run.pid is None:
            return ServerProcessState(ServerState.STOPPED)
        if self._alive(run):
            return ServerProcessState(ServerState.RUNNING, run.pid, None, run.started_at)
        # Exit 0, or a stop we asked for, is a normal end; anything else is a failure.
        # A re-attached server that vanished has no known exit status: that is a failure too.
        clean = run.stop_requested or run.exit_status == 0
        return ServerProcessState(
            ServerState.STOPPED if clean else ServerState.FAILED,
            None,
            run.exit_status,
            run.started_at,
        )

    def cgroup(self) -> ServerCgroup:
        """The running server's process; a stopped one starts as the agent's child, in the
        agent's own cgroup."""
        state = self.status()
        return ServerCgroup(pid=state.main_pid if state.running else None)

    def started(self, marker: str) -> bool:
        run = self._load_run()
        return run is not None and run.marker == marker and run.pid is not None

    def start(self, marker: str) -> None:
        current = self.status()
        if current.running:
            raise BackendError(
                f"the server is already running (pid {current.main_pid}); stop it before starting"
            )
        argv = self.read_command()
        try:
            self._log_file.parent.mkdir(parents=True, exist_ok=True)
            with self._log_file.open("ab") as log:
                offset = log.tell()
                pending = _Run(None, 0.0, self._clock.now().timestamp(), offset, marker=marker)
                self._save_run(pending)  # before the spawn: see the module docstring
                child = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={
                        **os.environ,
                        **self._env,
                        MARKER_ENV: marker,
                        STATE_DIR_ENV: str(self._state_dir),
                    },
                    start_new_session=True,  # its own process group: stop() signals all of it
                )
        except OSError as exc:
            raise BackendError(f"cannot start {argv[0]!r}: {exc}") from exc
        self._child = child
        try:
            create_time = psutil.Process(child.pid).create_time()
        except psutil.NoSuchProcess:
            create_time = 0.0  # exited at once; poll() on our child still gives its status
        self._save_run(_Run(child.pid, create_time, pending.started_at, offset, marker=marker))

    def stop(self, grace_s: float) -> StopResult:
        return self._end(grace_s)

    def kill(self) -> StopResult:
        return self._end(None)

    def _end(self, grace_s: float | None) -> StopResult:
        """SIGTERM and SIGKILL after ``grace_s``; SIGKILL at once when ``grace_s`` is None."""
        began = self._clock.monotonic()
        run = self._load_run()
        if run is None or run.pid is None or not self._alive(run):
            return StopResult("not_running", 0.0, run.exit_status if run else None)
        run.stop_requested = True
        self._save_run(run)
        how: StopHow = "killed"
        if grace_s is not None:
            self._signal(run.pid, signal.SIGTERM)
            if self._wait_gone(run, grace_s):
                how = "terminated"
        if how == "killed":
            self._signal(run.pid, signal.SIGKILL)
            if not self._wait_gone(run, _KILL_WAIT_S):
                raise BackendError(
                    f"server pid {run.pid} survived SIGKILL for {_KILL_WAIT_S:.0f} s "
                    "(stuck in the kernel?); check it with ps before starting again"
                )
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signal.SIGKILL)  # leftovers of its group, if any
        final = self._load_run()
        status = final.exit_status if final else None
        return StopResult(how, self._clock.monotonic() - began, status)

    def release(self) -> None:
        """Collect the exit status of a child this instance started and another stopped, so
        no ``Popen`` is garbage-collected while it still counts as running."""
        if self._child is not None:
            self._child.poll()

    def _wait_gone(self, run: _Run, timeout_s: float) -> bool:
        deadline = self._clock.monotonic() + timeout_s
        while self._alive(run):
            if self._clock.monotonic() >= deadline:
                return False
            self._clock.sleep(_POLL_S)
        return True

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        """Signal the server's process group (its pid, since it leads its own session)."""
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
                return
        with contextlib.suppress(ProcessLookupError):
            try:
                os.killpg(pid, sig)  # the leader is gone; its group may live on
            except ProcessLookupError:
                os.kill(pid, sig)
        # PermissionError propagates as it should: the agent must own the server.

    def open_log(self, since: float | None = None) -> FileLogSource:
        run = self._load_run()
        if since is not None and run is not None and since <= run.started_at:
            return FileLogSource(self._log_file, run.log_offset)
        try:
            offset = self._log_file.stat().st_size
        except FileNotFoundError:
            offset = 0
        return FileLogSource(self._log_file, offset)

    def last_run_key(self) -> str | None:
        run = self._load_run()
        try:
            size = self._log_file.stat().st_size
        except FileNotFoundError:
            return None
        offset = run.log_offset if run else 0
        # Past its first bytes a run's startup is all written: the key stops changing there, so
        # a long-running server's access lines do not make readers parse its start again.
        return f"{offset}:{min(size - offset, _RUN_KEY_BYTES)}"

    def last_run_log(self, max_bytes: int) -> str:
        run = self._load_run()
        try:
            with self._log_file.open("rb") as handle:
                handle.seek(run.log_offset if run else 0)
                data = handle.read(max_bytes)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise BackendError(f"cannot read the server log {self._log_file}: {exc}") from exc
        return data.decode("utf-8", errors="replace")


def _argv_from(stored: object, path: Path) -> list[str]:
    argv = stored.get("argv") if isinstance(stored, dict) else None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise BackendError(f"{path} does not hold a command ({{'argv': [...]}}); fix or remove it")
    return list(argv)


def _find_by_marker(marker: str, state_dir: str) -> tuple[int, float] | None:
    """(pid, create time) of the live process-group leader whose environment carries
    ``KIMI_OPS_OPERATION=marker`` and this agent's state directory: the server, not the children
    that inherited the variables."""
    for process in psutil.process_iter(["pid", "create_time"]):
        try:
            environ = process.environ()
            if environ.get(MARKER_ENV) != marker or environ.get(STATE_DIR_ENV) != state_dir:
                continue
            if os.getpgid(process.pid) != process.pid or process.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue  # gone, or another user's: not ours
        return process.pid, float(process.info["create_time"])
    return None
