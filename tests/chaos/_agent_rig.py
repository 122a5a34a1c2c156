"""The agent's chaos rig: ``kimi-ops agent`` as a real process over real HTTP on the simulator.

A rig is one host on the test's tmp dir: the simulator (``python -m bot.sim``, the small-2gpu
profile at a fast time scale) as the server, on the process backend (the agent's child) or on
the systemd backend (a unit run by the stand-in ``systemctl``/``journalctl`` of
``tests/agent/fake_systemd/``: systemd is not PID 1 here), host facts from the simulated host,
and the agent's real SQLite state. The first server is started before any agent, as by an
earlier run of it; each :class:`AgentProcess` is a fresh ``python -m bot agent`` on the same
config and state, its stderr read through a pipe (a pipe is not subject to a file-size limit, so
its log survives a "full disk").

Every scenario ends with :meth:`AgentRig.check`: the agent's state files parse (SQLite's
integrity check, every JSON record), the operation's events are numbered 1..n with no step
twice, revisions are unique (one per start of an operation's stage), and the server's command on
disk is one of the versions the test knows, the one the agent's status says it will run.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from bot.agent.config import AgentSettings, load_agent_settings
from bot.agent.control.systemd import DROP_IN_NAME, parse_exec_start
from bot.agent.service import make_control
from bot.agent.sglang_client import SGLangClient
from bot.agent.write_hook import CRASH_AT_ENV
from bot.vocab import FINAL_OPERATION_STATES
from tests.agent._api_helpers import TOKEN, TOKEN_ENV, auth, free_port, write_config
from tests.agent._ops_fixtures import _kill_simulators

__all__ = ["AgentProcess", "AgentRig", "agent_rig", "replace_flag"]

REPO = Path(__file__).resolve().parents[2]
FAKE_SYSTEMD = REPO / "tests" / "agent" / "fake_systemd"
UNIT = "sglang-chaos.service"
PROFILE = "small-2gpu"
# small-2gpu at --mem-fraction-static 0.7: 150,000 device tokens of 35,136 B (the profile).
BASE_FLAGS = ("--mem-fraction-static", "0.7")
RATIO_2 = (*BASE_FLAGS, "--enable-hierarchical-cache", "--hicache-ratio", "2")
# A small-profile start takes well under a second of real time at this scale.
TIME_SCALE = 0.01
_FINAL = {state.value for state in FINAL_OPERATION_STATES}
_START_SERVER = (
    "import os, sys\n"
    "from pathlib import Path\n"
    "from bot.agent.config import load_agent_settings\n"
    "from bot.agent.service import make_control\n"
    'make_control(load_agent_settings(Path(sys.argv[1]), os.environ)).start("chaos:0")\n'
)


def replace_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag``'s value replaced: the command line a resize should write, derived
    here rather than taken from the agent."""
    out = list(argv)
    index = out.index(flag)
    out[index + 1] = value
    return out


@dataclass
class AgentProcess:
    """One ``kimi-ops agent`` process; its stderr lines gathered by a thread."""

    process: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)
    url: str = ""
    _http: httpx.Client | None = None

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._gather, daemon=True)
        self._reader.start()

    def _gather(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.lines.append(raw.decode("utf-8", errors="replace"))

    def log(self) -> str:
        return "".join(self.lines)

    def wait_log(self, text: str, timeout_s: float = 30) -> None:
        """Wait until ``text`` is in the agent's log (its stderr reaches us through a thread)."""
        deadline = time.monotonic() + timeout_s
        while text not in self.log():
            if time.monotonic() > deadline:
                pytest.fail(f"not in the agent's log within {timeout_s} s: {text!r}\n{self.log()}")
            time.sleep(0.05)

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(base_url=self.url, headers=auth(), timeout=60)
        return self._http

    def submit(self, **body: Any) -> httpx.Response:
        """POST /v1/operations with ``actor`` "ana" unless given."""
        return self.http.post("/v1/operations", json={"actor": "ana", **body})

    def status(self) -> dict[str, Any]:
        response = self.http.get("/v1/status")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def follow(
        self, op_id: int, until: Callable[[list[dict[str, Any]]], bool] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Long-poll ``op_id`` until it is final (or ``until(events)`` holds), within 180 s; the
        last body and every event, once each."""
        events: list[dict[str, Any]] = []
        after = 0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            body = self.http.get(
                f"/v1/operations/{op_id}", params={"after": after, "wait": 5}
            ).json()
            events += body["events"]
            after = body["last_seq"]
            if body["state"] in _FINAL or (until is not None and until(events)):
                return body, events
        pytest.fail(f"operation {op_id} did not end within 180 s; last events {events[-3:]}")

    def wait_exit(self, timeout_s: float = 120) -> int:
        """The exit code once the process ends (bounded; -9 for SIGKILL)."""
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the agent did not exit within {timeout_s} s:\n{self.log()[-3000:]}")
        self._reader.join(timeout=30)  # the rest of its log, up to the pipe's end
        return code

    def limit_file_size(self, n_bytes: int | None) -> None:
        """Set the running agent's soft RLIMIT_FSIZE (None: no limit), as a disk that fills
        (or is emptied) while it runs; its SIGXFSZ is ignored, so writes fail with EFBIG."""
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        soft = resource.RLIM_INFINITY if n_bytes is None else n_bytes
        psutil.Process(self.process.pid).rlimit(psutil.RLIMIT_FSIZE, (soft, hard))

    def stop(self) -> int:
        """SIGTERM, then the exit code (bounded)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait_exit(30)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        self._reader.join(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()


@dataclass
class AgentRig:
    """One simulated host and its agent's config on the test's tmp dir (module docstring)."""

    tmp: Path
    backend: str
    config: Path
    settings: AgentSettings
    env: dict[str, str]
    initial_argv: list[str]
    agents: list[AgentProcess] = field(default_factory=list)

    # -- the server ---------------------------------------------------------------------------

    def start_server(self) -> None:
        """Start the configured server as an earlier run of the agent would have (a process
        that exits once it is spawned: the server is no child of the test), and wait for health
        200."""
        subprocess.run(
            [sys.executable, "-c", _START_SERVER, str(self.config)],
            env=self.env,
            check=True,
            timeout=60,
        )
        control = make_control(self.settings)
        with SGLangClient(self.settings.server_url, timeout=2.0) as client:
            deadline = time.monotonic() + 60
            while client.health() != 200:
                assert time.monotonic() < deadline, f"no health 200:\n{self.log_text()[-2000:]}"
                assert control.status().running, self.log_text()[-2000:]
                time.sleep(0.05)

    def set_server_env(self, env: Mapping[str, str]) -> None:
        """From the next start on, the server runs with ``env`` added: in the agent's
        ``[agent.env]`` (read when an agent starts) or a drop-in of the operator's own."""
        if self.backend == "process":
            lines = "".join(f"{name} = {json.dumps(value)}\n" for name, value in env.items())
            self.config.write_text(self.config.read_text() + lines)  # [agent.env] is last
            self.settings = load_agent_settings(self.config, self.env)
            return
        folder = self.settings.unit_dir / f"{UNIT}.d"
        folder.mkdir(exist_ok=True)
        lines = "".join(f"Environment={name}={value}\n" for name, value in env.items())
        (folder / "10-chaos-env.conf").write_text("[Service]\n" + lines)

    def server_info(self) -> dict[str, Any] | None:
        with SGLangClient(self.settings.server_url, timeout=2.0) as client:
            return client.server_info()

    def server_pid(self) -> int | None:
        return make_control(self.settings).status().main_pid

    def log_text(self) -> str:
        path = self.settings.log_file if self.backend == "process" else self._journal
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def _journal(self) -> Path:
        return self.tmp / "fake-systemd" / f"{UNIT}.journal"

    def starts(self) -> int:
        """How many times a server was started: the simulator's own ``server_args=`` line,
        once per start, in its output."""
        return self.log_text().count("server_args=")

    def command_on_disk(self) -> list[str]:
        """The command line the next start runs, read from the backend's file (the command
        record or the drop-in; the unit's own ExecStart when there is no drop-in)."""
        if self.backend == "process":
            stored = json.loads((self.settings.state_dir / "command.json").read_text())
            return list(stored["argv"])
        drop_in = self.settings.unit_dir / f"{UNIT}.d" / DROP_IN_NAME
        if not drop_in.exists():
            return list(self.initial_argv)
        return parse_exec_start(drop_in.read_text().splitlines()[-1].partition("=")[2])

    def config_files(self) -> list[Path]:
        """The files the backend writes the server's config and its start records to."""
        if self.backend == "process":
            return [self.settings.state_dir / name for name in ("command.json", "server.json")]
        folder = self.settings.unit_dir / f"{UNIT}.d"
        return sorted(p for p in folder.glob("50-kimi-ops-*") if not p.name.endswith(".tmp"))

    # -- the agent ----------------------------------------------------------------------------

    def start_agent(
        self,
        *,
        crash_at: str | None = None,
        file_size_limit: int | None = None,
        wait_ready: bool = True,
    ) -> AgentProcess:
        """Start ``kimi-ops agent`` on this config (``crash_at``: its test hook; with
        ``file_size_limit`` its RLIMIT_FSIZE from the start); wait until it serves unless
        ``wait_ready`` is False (an agent that may die first)."""
        env = dict(self.env)
        if crash_at is not None:
            env[CRASH_AT_ENV] = crash_at
        addr = self.settings.state_dir / "agent.addr"
        addr.unlink(missing_ok=True)
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "agent", "--config", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=_file_size_limit(file_size_limit),
        )
        agent = AgentProcess(process)
        self.agents.append(agent)
        if not wait_ready:
            return agent
        deadline = time.monotonic() + 90
        while not addr.is_file():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the agent did not start:\n{agent.log()[-3000:]}")
            time.sleep(0.05)
        agent.url = addr.read_text(encoding="utf-8").strip()
        return agent

    # -- the checker --------------------------------------------------------------------------

    def check(
        self, agent: AgentProcess, op_id: int | None, known: Sequence[Sequence[str]]
    ) -> list[dict[str, Any]]:
        """The checks every scenario ends with (module docstring); ``known``: the command lines
        the server may have on disk. Returns the operation's events (none without ``op_id``)."""
        self.check_files()
        on_disk = self.command_on_disk()
        assert on_disk in [list(k) for k in known], f"unknown command on disk: {on_disk}"
        assert agent.status()["config"]["command"] == on_disk, "the agent reads another command"
        revisions = agent.http.get("/v1/revisions").json()["revisions"]
        ids = [r["id"] for r in revisions]
        assert len(ids) == len(set(ids)), f"a revision id twice: {ids}"
        per_start = [(r["operation_id"], r["kind"]) for r in revisions if r["operation_id"]]
        assert len(per_start) == len(set(per_start)), f"a start recorded twice: {per_start}"
        if op_id is None:
            return []
        replay = agent.http.get(f"/v1/operations/{op_id}", params={"after": 0}).json()
        events: list[dict[str, Any]] = replay["events"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), events
        steps = [e["data"]["step"] for e in events if "step" in e["data"]]
        assert len(steps) == len(set(steps)), f"a step twice: {steps}"
        return events

    def check_files(self) -> None:
        """The agent's state file passes SQLite's integrity check; every JSON record parses."""
        state = self.settings.state_dir
        with contextlib.closing(sqlite3.connect(state / "agent.sqlite3", timeout=30)) as db:
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            db.execute("SELECT count(*) FROM operations").fetchone()
        for path in [*state.glob("*.json"), *self.config_files()]:
            if path.suffix == ".json" and path.exists():
                json.loads(path.read_text())  # a partial file would not parse
        for path in self.config_files():
            if path.suffix == ".conf" and path.exists():
                text = path.read_text()
                assert text.startswith("[Service]\nExecStart=\nExecStart="), text
                assert text.endswith("\n"), f"{path.name} cut short: {text!r}"

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        with contextlib.suppress(Exception):
            make_control(self.settings).stop(5)
        _kill_simulators(self.tmp)


def _file_size_limit(n_bytes: int | None) -> Callable[[], None]:
    """What the child runs before exec: SIGXFSZ ignored (a write past the limit then fails with
    EFBIG instead of killing the process), and the limit if one is given."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if n_bytes is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, hard))

    return apply


def _sim_env(tmp: Path, extra: Mapping[str, str]) -> dict[str, str]:
    return {
        "KIMI_SIM_PROFILE": PROFILE,
        "KIMI_SIM_TIME_SCALE": str(TIME_SCALE),
        "KIMI_SIM_VERSION": "0.5.9",
        "KIMI_SIM_STATE_DIR": str(tmp / "sim-host"),
        "PYTHONPATH": str(REPO),
        **extra,
    }


def _build(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    flags: Sequence[str],
    sim_env: Mapping[str, str],
    agent: Any,
) -> AgentRig:
    keys: dict[str, Any] = {
        "headroom_gb": 0,
        "stop_grace_s": 10,
        "gpu_free_timeout_s": 10,
        **agent,
    }
    env = {**os.environ, TOKEN_ENV: TOKEN}
    if backend == "process":
        config = write_config(tmp, profile=PROFILE, time_scale=TIME_SCALE, hicache=tuple(flags),
                              **keys)  # fmt: skip
        settings = load_agent_settings(config, env)
        # write_config sets the simulator's profile, scale and host; the rest here.
        config.write_text(config.read_text() + "".join(
            f"{name} = {json.dumps(value)}\n"
            for name, value in _sim_env(tmp, sim_env).items()
            if name not in settings.env
        ))  # fmt: skip
        settings = load_agent_settings(config, env)
        return AgentRig(tmp, backend, config, settings, env, list(settings.command))
    units, fake = tmp / "units", tmp / "fake-systemd"
    units.mkdir()
    fake.mkdir()
    port = free_port()
    argv = [sys.executable, "-m", "bot.sim", "--model-path", "/models/m", "--tp", "2",
            "--port", str(port), *flags]  # fmt: skip
    unit_env = _sim_env(tmp, sim_env)
    lines = [f"Environment={name}={value}" for name, value in unit_env.items()]
    (units / UNIT).write_text("\n".join(["[Service]", *lines, f"ExecStart={' '.join(argv)}", ""]))
    # The stand-in executables read where their state lives from the environment: the agent's,
    # and this process's for the test's own systemctl calls.
    env.update(FAKE_SYSTEMD_STATE=str(fake), FAKE_SYSTEMD_UNIT_DIR=str(units))
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(fake))
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(units))
    config = write_config(
        tmp, profile=PROFILE, time_scale=TIME_SCALE, hicache=tuple(flags), backend="systemd",
        unit=UNIT, unit_dir=str(units), systemctl=str(FAKE_SYSTEMD / "systemctl"),
        journalctl=str(FAKE_SYSTEMD / "journalctl"), server_url=f"http://127.0.0.1:{port}",
        **keys,
    )  # fmt: skip
    return AgentRig(tmp, backend, config, load_agent_settings(config, env), env, argv)


@pytest.fixture
def agent_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., AgentRig]]:
    """Build the test's rig: ``backend`` ("process" or "systemd"), the simulator's ``flags``
    and extra ``sim_env``, [agent] overrides as keywords. Afterwards every agent is killed, the
    server stopped and every simulator of the test killed."""
    made: list[AgentRig] = []

    def build(
        backend: str = "process",
        flags: Sequence[str] = RATIO_2,
        sim_env: Mapping[str, str] | None = None,
        **agent: Any,
    ) -> AgentRig:
        assert not made, "one rig per test: they would share the simulated host"
        rig = _build(tmp_path, monkeypatch, backend, flags, sim_env or {}, agent)
        made.append(rig)
        return rig

    yield build
    for rig in made:
        rig.close()
