"""The Docker backend: the server is a container; a change is a new container beside the old one.

The server's command is the container's entrypoint followed by its command, read through the
Docker Engine API (the ``docker`` SDK, low-level client; nothing shells out to the CLI)::

    Entrypoint ["python3", "-m", "sglang.launch_server"]  Cmd ["--tp", "8", "--hicache-ratio", "2"]
    -> ["python3", "-m", "sglang.launch_server", "--tp", "8", "--hicache-ratio", "2"]

A container's command cannot change, so a start with another command creates a new container
from the inspected one with only the command changed (the engine changes only the HiCache
flags): the same image (by id), the whole ``HostConfig`` (binds and mounts, network, pid and IPC
mode, ports, shm size, memory limit, device requests, ulimits, restart policy, ...), the
environment, user, working directory, labels (plus kimi-ops' own, the operation's start and the
container it replaces), stop signal and timeout, healthcheck, and the networks with their
aliases. Three names are used:

- ``NAME``: the server;
- ``NAME.next``: the new container, created and not yet renamed;
- ``NAME.previous``: the container the last change replaced, kept stopped (one; the next change
  removes it).

A start with a new command: create ``NAME.next``; remove ``NAME.previous``; rename ``NAME`` to
``NAME.previous``; rename ``NAME.next`` to ``NAME``; start it. A start whose command is
``NAME.previous``'s (the engine's rollback after a failed start) removes ``NAME`` and renames
``NAME.previous`` back. Every start first repairs what an agent killed between those steps left
(``NAME`` missing: ``NAME.next``, else ``NAME.previous``, becomes ``NAME``), so any kill ends,
at the next start, in one ``NAME`` and at most one ``NAME.previous``. Each step reports itself to
the ``WriteHook`` with the container's name as target (``NAME.next:written`` once created,
``NAME.previous:renamed``, ``NAME:renamed``), so ``KIMI_AGENT_CRASH_AT`` can kill the agent there.

State in ``state_dir``:

- ``docker-command.json``: the command written for the next start and the id of the container
  it was written against; once another container is ``NAME`` (started, or replaced by hand: a
  ``docker compose up``), the container's own command is the current one again;
- ``docker-start.json``: the last start's marker, its container and that container's start
  time before it (``started(marker)`` is true once the container started since);
- ``docker-stop.json``: the run the agent stopped, so its exit (143, 137) reads as stopped, not
  failed.

The container's cgroup is the server's memory domain (``cgroup()``: its main process while it
runs, else the cgroup the daemon will create with ``HostConfig.Memory`` as its limit), read by the
host probe as for any server.
"""

from __future__ import annotations

import codecs
import math
import queue
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.agent.cmdline import server_args_start
from bot.agent.control._atomic_file import read_json, write_json
from bot.agent.control._port import port_conflict, server_tree
from bot.agent.control.protocol import CommandEdit, ServerProcessState, StopHow, StopResult
from bot.agent.host.probe import ServerCgroup
from bot.agent.write_hook import NO_WRITE_HOOK, WriteHook, WriteMoment
from bot.clock import Clock
from bot.errors import BackendError, CommandLineError
from bot.vocab import ServerState

if TYPE_CHECKING:
    from pathlib import Path

    from bot.agent.config import AgentSettings

__all__ = [
    "DEFAULT_DOCKER_HOST",
    "LABEL_OPERATION",
    "LABEL_REPLACES",
    "DockerControl",
    "DockerLogSource",
    "container_argv",
]

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
#: The Engine API version asked for: Docker 20.10 and Podman 3 speak it.
API_VERSION = "1.41"
LABEL_OPERATION = "io.kimi-ops.operation"
LABEL_REPLACES = "io.kimi-ops.replaces"
_NEVER = "0001-01-01T00:00:00Z"  # State.StartedAt of a container never started
_POLL_S = 0.1
_KILL_WAIT_S = 30
_RUN_KEY_BYTES = 8 * 1024 * 1024
_NETWORK_MODES_WITHOUT_ENDPOINTS = ("host", "none", "default", "bridge")


def container_argv(inspected: Mapping[str, Any]) -> list[str]:
    """The server's argv: the container's entrypoint, then its command."""
    config = inspected.get("Config") or {}
    return [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]


def _started_at(inspected: Mapping[str, Any]) -> float | None:
    """``State.StartedAt`` (RFC 3339 with nanoseconds) as Unix time; None if never started."""
    text = str((inspected.get("State") or {}).get("StartedAt") or _NEVER)
    if text.startswith("0001-"):
        return None
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", text)
    if match is None:
        raise BackendError(f"cannot read the container's start time {text!r}")
    fraction = (match.group(2) or ".0")[:7]
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(match.group(1) + fraction + zone).timestamp()


class DockerLogSource:
    """A container's log stream (``follow``) read on a thread, handed out without blocking."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        # A character split between two chunks is held back until its last byte comes.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ended: str | None = None
        self._thread = threading.Thread(target=self._pump, name="docker-logs", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for chunk in self._stream:
                self._chunks.put(bytes(chunk))
        except Exception as exc:  # the stream closed under us (close()) or the daemon went away
            self._ended = f"the container's log stream broke ({exc}); following the endpoints"
        # A stream that simply ends is the container's exit, which its state tells.

    def problem(self) -> str | None:
        """The stream is the container's, by id: a log file's rotation never hides it. Only the
        stream breaking (the daemon restarted under it) stops the output."""
        return self._ended

    def read_new(self) -> str:
        text = ""
        while True:
            try:
                text += self._decoder.decode(self._chunks.get_nowait())
            except queue.Empty:
                return text

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # already closed by the daemon's end of the stream
                return


class DockerControl:
    """``ServerControl`` over a Docker container named ``container``."""

    name = "docker"

    def __init__(
        self,
        container: str,
        docker_host: str,
        state_dir: Path,
        clock: Clock,
        write_hook: WriteHook = NO_WRITE_HOOK,
        timeout_s: float = 60.0,
    ) -> None:
        self.container = container
        self.docker_host = docker_host
        self._state_dir = state_dir
        self._clock = clock
        self._hook = write_hook
        self._timeout_s = timeout_s
        self._client: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(
        cls, settings: AgentSettings, clock: Clock, write_hook: WriteHook = NO_WRITE_HOOK
    ) -> DockerControl:
        return cls(settings.container, settings.docker_host, settings.state_dir, clock, write_hook)

    @property
    def previous_name(self) -> str:
        return f"{self.container}.previous"

    @property
    def next_name(self) -> str:
        return f"{self.container}.next"

    # -- the Engine API ----------------------------------------------------------------------

    def _api(self) -> Any:
        with self._lock:
            if self._client is None:
                import docker  # the SDK is imported by the backend that uses it only

                try:
                    self._client = docker.APIClient(
                        base_url=self.docker_host,
                        version=API_VERSION,
                        timeout=int(self._timeout_s),
                    )
                except docker.errors.DockerException as exc:
                    raise BackendError(
                        f"cannot use the Docker daemon at {self.docker_host}: {exc}; check "
                        "[agent] docker_host"
                    ) from exc
            return self._client

    def close(self) -> None:
        """Close the connection pool to the daemon (the next call opens another)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _call(
        self, what: str, method: str, *args: Any, missing_ok: bool = False, **kwargs: Any
    ) -> Any:
        """One Engine API call; the SDK's and requests' errors become a BackendError naming the
        daemon's address. ``missing_ok``: a container that does not exist gives None."""
        import docker
        import requests

        try:
            return getattr(self._api(), method)(*args, **kwargs)
        except docker.errors.NotFound as exc:
            if missing_ok:
                return None
            raise BackendError(f"{what}: no such container on {self.docker_host}") from exc
        except requests.exceptions.ConnectionError as exc:
            raise BackendError(
                f"cannot reach the Docker daemon at {self.docker_host} ({what}): {exc}; is "
                "dockerd running, and is [agent] docker_host (or DOCKER_HOST) its socket?"
            ) from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise BackendError(
                f"the Docker daemon at {self.docker_host} refused {what}: {exc}"
            ) from exc

    def inspect(self, name: str) -> dict[str, Any] | None:
        """The container named (or with the id) ``name`` as ``docker inspect`` shows it; None
        if there is none."""
        found = self._call(f"inspect {name}", "inspect_container", name, missing_ok=True)
        return None if found is None else dict(found)

    def _current(self) -> dict[str, Any]:
        found = self.inspect(self.container)
        if found is None:
            raise BackendError(
                f"there is no container named {self.container!r} on {self.docker_host}; "
                "[agent] container names the server's container (docker ps -a lists them)"
            )
        return found

    # -- command -----------------------------------------------------------------------------

    @property
    def _command_path(self) -> Path:
        return self._state_dir / "docker-command.json"

    @property
    def _start_path(self) -> Path:
        return self._state_dir / "docker-start.json"

    @property
    def _stop_path(self) -> Path:
        return self._state_dir / "docker-stop.json"

    def _pending(self, current: Mapping[str, Any] | None) -> list[str] | None:
        """The command written for the next start, while it is not yet the container's own."""
        stored = read_json(self._command_path)
        if not isinstance(stored, dict):
            return None
        argv = stored.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not argv:
            raise BackendError(
                f"{self._command_path} does not hold a command ({{'argv': [...]}}); remove it"
            )
        if current is not None and current.get("Id") != stored.get("base"):
            return None  # another container is NAME now: its own command is the current one
        return list(argv)

    def read_command(self) -> list[str]:
        current = self.inspect(self.container)
        pending = self._pending(current)
        if pending is not None:
            return pending
        if current is None:
            current = self._current()  # raises, naming the container
        argv = container_argv(current)
        try:
            server_args_start(argv)
        except CommandLineError as exc:
            raise CommandLineError(
                f"container {self.container!r} does not run SGLang's server: its entrypoint and "
                f"command are {argv!r}; kimi-ops drives 'python3 -m sglang.launch_server ...' "
                f"or 'sglang serve ...' ({exc})"
            ) from exc
        return argv

    def write_command(self, argv: Sequence[str]) -> None:
        current = self._current()
        write_json(self._command_path, {"argv": list(argv), "base": current["Id"]}, hook=self._hook)

    def previous_command(self) -> list[str] | None:
        current = self.inspect(self.container)
        if current is not None and self._pending(current) is not None:
            return container_argv(current)
        previous = self.inspect(self.previous_name)
        return None if previous is None else container_argv(previous)

    # -- state -------------------------------------------------------------------------------

    def status(self) -> ServerProcessState:
        found = self.inspect(self.container)
        if found is None:
            if self.inspect(self.next_name) or self.inspect(self.previous_name):
                return ServerProcessState(ServerState.STOPPED)  # between two renames
            self._current()  # raises, naming the container
        assert found is not None
        return self._state_of(found)

    def _state_of(self, found: Mapping[str, Any]) -> ServerProcessState:
        state = found.get("State") or {}
        started_at = _started_at(found)
        pid = int(state.get("Pid") or 0) or None
        status = str(state.get("Status", ""))
        exit_code = state.get("ExitCode")
        exit_status = int(exit_code) if isinstance(exit_code, int) else None
        if status in ("running", "paused"):
            return ServerProcessState(ServerState.RUNNING, pid, None, started_at)
        if status == "restarting":
            return ServerProcessState(ServerState.STARTING, pid, exit_status, started_at)
        if status == "created" or started_at is None:
            return ServerProcessState(ServerState.STOPPED, None, None, started_at)
        stopped = read_json(self._stop_path)
        asked = (
            isinstance(stopped, dict)
            and stopped.get("container") == found.get("Id")
            and stopped.get("started_at") == (found.get("State") or {}).get("StartedAt")
        )
        clean = asked or exit_status == 0
        return ServerProcessState(
            ServerState.STOPPED if clean else ServerState.FAILED, None, exit_status, started_at
        )

    # -- start -------------------------------------------------------------------------------

    def start(self, marker: str) -> None:
        self._repair()
        desired = self.read_command()
        current = self._current()
        if self._state_of(current).running:
            raise BackendError(
                f"container {self.container} is already running (pid "
                f"{current['State'].get('Pid')}); stop it first"
            )
        previous = self.inspect(self.previous_name)
        if container_argv(current) == desired:
            target = current
        elif previous is not None and container_argv(previous) == desired:
            target = self._swap_back(current, previous)
        else:
            target = self._replace(current, previous, desired, marker)
        state = target.get("State") or {}
        record = {"marker": marker, "container": target["Id"], "before": state.get("StartedAt")}
        write_json(self._start_path, record, hook=self._hook)
        self._call(f"start {self.container}", "start", target["Id"])

    def _repair(self) -> None:
        """After an agent killed between two renames: make ``NAME`` exist again."""
        if self.inspect(self.container) is not None:
            return
        for name in (self.next_name, self.previous_name):
            if self.inspect(name) is not None:
                self._call(f"rename {name}", "rename", name, self.container)
                return

    def _swap_back(self, failed: Mapping[str, Any], previous: Mapping[str, Any]) -> dict[str, Any]:
        """The command asked for is the replaced container's: remove the new one (a rollback
        after its failed start) and give the old one its name back."""
        self._call(f"remove {self.container}", "remove_container", failed["Id"], force=True)
        self._hook.reach(self.container, WriteMoment.PARTIAL)
        self._call(f"rename {self.previous_name}", "rename", previous["Id"], self.container)
        self._hook.reach(self.container, WriteMoment.RENAMED)
        return self._current()

    def _replace(
        self,
        current: Mapping[str, Any],
        previous: Mapping[str, Any] | None,
        argv: list[str],
        marker: str,
    ) -> dict[str, Any]:
        stale = self.inspect(self.next_name)
        if stale is not None:  # an earlier start's, killed before it was renamed
            self._call(f"remove {self.next_name}", "remove_container", stale["Id"], force=True)
        created = self._create(current, argv, marker)
        self._hook.reach(self.next_name, WriteMoment.WRITTEN)
        if previous is not None:
            self._call(
                f"remove {self.previous_name}", "remove_container", previous["Id"], force=True
            )
        self._call(f"rename {self.container}", "rename", current["Id"], self.previous_name)
        self._hook.reach(self.previous_name, WriteMoment.RENAMED)
        self._call(f"rename {self.next_name}", "rename", created, self.container)
        self._hook.reach(self.container, WriteMoment.RENAMED)
        return self._current()

    def _create(self, source: Mapping[str, Any], argv: list[str], marker: str) -> str:
        """Create ``NAME.next`` as ``source`` with ``argv`` as its entrypoint and command."""
        config = source.get("Config") or {}
        entrypoint = list(config.get("Entrypoint") or [])
        if entrypoint and argv[: len(entrypoint)] == entrypoint:
            command = argv[len(entrypoint) :]
        else:
            entrypoint, command = argv[:1], argv[1:]
        labels = dict(config.get("Labels") or {})
        labels[LABEL_OPERATION] = marker
        labels[LABEL_REPLACES] = str(source["Id"])
        host_config = dict(source.get("HostConfig") or {})
        networks = dict((source.get("NetworkSettings") or {}).get("Networks") or {})
        mode = str(host_config.get("NetworkMode") or "default")
        endpoints = {}
        if mode not in _NETWORK_MODES_WITHOUT_ENDPOINTS and not mode.startswith("container:"):
            short = str(source["Id"])[:12]
            for network, endpoint in networks.items():
                endpoints[network] = {
                    "Aliases": [a for a in endpoint.get("Aliases") or [] if a != short],
                    "IPAMConfig": endpoint.get("IPAMConfig"),
                    "Links": endpoint.get("Links"),
                }
        first = dict(list(endpoints.items())[:1])
        created = self._call(
            f"create {self.next_name}",
            "create_container",
            source["Image"],
            command=command,
            entrypoint=entrypoint,
            hostname=None if mode == "host" else config.get("Hostname") or None,
            domainname=config.get("Domainname") or None,
            user=config.get("User") or None,
            environment=list(config.get("Env") or []),
            working_dir=config.get("WorkingDir") or None,
            labels=labels,
            ports=list((config.get("ExposedPorts") or {}).keys()) or None,
            volumes=list((config.get("Volumes") or {}).keys()) or None,
            stdin_open=bool(config.get("OpenStdin")),
            tty=bool(config.get("Tty")),
            stop_signal=config.get("StopSignal") or None,
            stop_timeout=config.get("StopTimeout"),
            healthcheck=config.get("Healthcheck"),
            host_config=host_config,
            networking_config={"EndpointsConfig": first} if first else None,
            name=self.next_name,
            use_config_proxy=False,
        )
        new_id = str(created["Id"])
        for network, endpoint in list(endpoints.items())[1:]:
            self._call(
                f"connect {self.next_name} to {network}",
                "connect_container_to_network",
                new_id,
                network,
                aliases=endpoint["Aliases"] or None,
            )
        return new_id

    def started(self, marker: str) -> bool:
        record = read_json(self._start_path)
        if not isinstance(record, dict) or record.get("marker") != marker:
            return False
        found = self.inspect(str(record.get("container")))
        if found is None:
            return False
        now = (found.get("State") or {}).get("StartedAt")
        return bool(now) and now != _NEVER and now != record.get("before")

    # -- stop --------------------------------------------------------------------------------

    def stop(self, grace_s: float) -> StopResult:
        return self._end(grace_s)

    def kill(self) -> StopResult:
        return self._end(None)

    def _end(self, grace_s: float | None) -> StopResult:
        """The container's stop signal, then SIGKILL after ``grace_s`` (at once when None)."""
        began = self._clock.monotonic()
        found = self.inspect(self.container)
        if found is None or not self._state_of(found).running:
            exit_status = None if found is None else self._state_of(found).exit_status
            return StopResult("not_running", 0.0, exit_status)
        state = found.get("State") or {}
        write_json(
            self._stop_path,
            {"container": found["Id"], "started_at": state.get("StartedAt")},
            hook=self._hook,
        )
        # docker stop, not kill: a container stopped through it is "stopped by hand", so its
        # restart policy does not start it again behind the agent's back.
        seconds = 0 if grace_s is None else max(0, math.ceil(grace_s))
        self._call(f"stop {self.container}", "stop", found["Id"], timeout=seconds)
        self._wait_stopped(found["Id"])
        duration = self._clock.monotonic() - began
        how: StopHow = "killed" if grace_s is None or duration >= grace_s else "terminated"
        after = self.inspect(found["Id"])
        exit_status = None if after is None else self._state_of(after).exit_status
        return StopResult(how, duration, exit_status)

    def _wait_stopped(self, container_id: str) -> None:
        deadline = self._clock.monotonic() + _KILL_WAIT_S
        while True:
            found = self.inspect(container_id)
            if found is None or not self._state_of(found).running:
                return
            if self._clock.monotonic() >= deadline:
                raise BackendError(
                    f"container {self.container} still runs {_KILL_WAIT_S} s after SIGKILL"
                )
            self._clock.sleep(_POLL_S)

    # -- logs --------------------------------------------------------------------------------

    def open_log(self, since: float | None = None) -> DockerLogSource:
        """The container's output from its start at ``since`` (its whole run when ``since`` is
        its start time), else only what it writes from now on."""
        found = self._current()
        kwargs: dict[str, Any] = {"stream": True, "follow": True}
        if since is None:
            kwargs["tail"] = 0
        else:
            kwargs["since"] = float(since)
        stream = self._call(f"logs of {self.container}", "logs", found["Id"], **kwargs)
        return DockerLogSource(stream)

    def last_run_key(self) -> str | None:
        found = self.inspect(self.container)
        if found is None or _started_at(found) is None:
            return None
        return f"{found['Id']}:{(found.get('State') or {}).get('StartedAt')}"

    def last_run_log(self, max_bytes: int) -> str:
        found = self.inspect(self.container)
        if found is None:
            return ""
        since = _started_at(found)
        if since is None:
            return ""
        stream = self._call(
            f"logs of {self.container}", "logs", found["Id"], stream=True, follow=False,
            since=since,
        )  # fmt: skip
        data = b""
        try:
            for chunk in _chunks(stream):
                data += chunk
                if len(data) >= max_bytes:
                    break
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return data[:max_bytes].decode("utf-8", errors="replace")

    # -- the command's source and the port -----------------------------------------------------

    def command_edit(self) -> CommandEdit | None:
        return None  # the command is the container's, never [agent] command

    def adopt_configured(self) -> None:
        raise BackendError(
            f"with the docker backend the command is container {self.container}'s, not "
            "[agent] command: change the container (or its compose file) instead"
        )

    def port_conflict(self, host: str, port: int) -> str | None:
        """As the other backends, for a container on the host's network, where its own
        processes hold the port; behind Docker's port publishing the host port is held by
        ``docker-proxy``, never the server's tree, so nothing can be told and None is said."""
        found = self._current()
        if str((found.get("HostConfig") or {}).get("NetworkMode") or "") != "host":
            return None
        return port_conflict(host, port, server_tree(self._state_of(found).main_pid))

    # -- the memory domain -------------------------------------------------------------------

    def cgroup(self) -> ServerCgroup:
        """The running container's main process (its cgroup is the container's, limited by
        ``HostConfig.Memory``); a stopped one's cgroup as the daemon will create it again:
        ``<CgroupParent or /docker>/<id>`` with the cgroupfs driver,
        ``<CgroupParent or system.slice>/docker-<id>.scope`` with systemd's, with its memory
        limit (``HostConfig.Memory``; 0 is none) and reservation (``memory.high`` is not set
        by Docker)."""
        found = self._current()
        state = self._state_of(found)
        if state.running and state.main_pid is not None:
            return ServerCgroup(pid=state.main_pid)
        host_config = found.get("HostConfig") or {}
        parent = str(host_config.get("CgroupParent") or "")
        driver = str(self._call("info", "info").get("CgroupDriver") or "cgroupfs")
        if driver == "systemd":
            path = f"/{(parent or 'system.slice').strip('/')}/docker-{found['Id']}.scope"
        else:
            path = f"/{(parent or 'docker').strip('/')}/{found['Id']}"
        limit = int(host_config.get("Memory") or 0)
        return ServerCgroup(planned_path=path, planned_max_bytes=limit or None)


def _chunks(stream: Any) -> Iterator[bytes]:
    for chunk in stream:
        yield bytes(chunk)
