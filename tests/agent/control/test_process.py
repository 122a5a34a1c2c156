"""Tests for the process backend, against real child processes.

The "server" is a small Python program (printing lines, handling or ignoring SIGTERM), which is
all the backend sees of SGLang: an argv, a process group, a log.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from bot.agent.control.process import STATE_DIR_ENV, ProcessControl
from bot.agent.control.protocol import MARKER_ENV, LogSource, ServerControl
from bot.clock import SystemClock
from bot.errors import BackendError
from bot.vocab import ServerState
from tests.agent.conftest import PYTHON, Spawn, wait_until

SERVE = (
    "import os, signal, sys, time\n"
    "print('server up', os.environ.get('KIMI_TEST_MARK', '-'), sys.argv[1:], flush=True)\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ignoring SIGTERM', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)
WITH_CHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '60'])\n"
    "print('child', child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _control(tmp_path: Path, code: str, *args: str) -> ProcessControl:
    return ProcessControl(
        state_dir=tmp_path / "state",
        initial_command=[PYTHON, "-c", code, *args],
        log_file=tmp_path / "server.log",
        env={"KIMI_TEST_MARK": "from-settings"},
        clock=SystemClock(),
    )


@pytest.fixture
def controls() -> list[ProcessControl]:
    """Controls whose servers are stopped after the test, whatever happened."""
    made: list[ProcessControl] = []
    yield made  # type: ignore[misc]
    for control in made:
        control.stop(grace_s=0.1)


def test_it_is_a_server_control(tmp_path: Path) -> None:
    """ProcessControl satisfies the ServerControl protocol the agent is written against."""
    control: ServerControl = _control(tmp_path, SERVE)
    assert control.name == "process"


def test_command_starts_from_settings_and_keeps_the_previous(tmp_path: Path) -> None:
    """The first read stores the configured argv; a write keeps the one before it."""
    control = _control(tmp_path, SERVE)
    first = control.read_command()
    assert first == [PYTHON, "-c", SERVE]
    assert control.previous_command() is None
    control.write_command([*first, "--hicache-ratio", "4"])
    assert control.read_command() == [*first, "--hicache-ratio", "4"]
    assert control.previous_command() == first
    stored = json.loads((tmp_path / "state" / "command.json").read_text())
    # Beside the argv, the [agent] command it was taken from: an edit is told from a change.
    assert stored == {"argv": [*first, "--hicache-ratio", "4"], "config": first}
    assert not [p for p in (tmp_path / "state").iterdir() if p.name.endswith(".tmp")]


def test_corrupt_command_file_is_a_backend_error(tmp_path: Path) -> None:
    """A damaged command.json is reported with its path, not used."""
    control = _control(tmp_path, SERVE)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "command.json").write_text("{not json")
    with pytest.raises(BackendError, match=r"command\.json"):
        control.read_command()


@pytest.mark.slow
def test_start_logs_output_with_env_and_reports_active(
    tmp_path: Path, controls: list[ProcessControl]
) -> None:
    """A started server runs with [agent] env, logs to the file, and is active with its pid."""
    control = _control(tmp_path, SERVE, "--tp", "2")
    controls.append(control)
    assert control.status().state == ServerState.STOPPED
    log = control.open_log()
    control.start("test:1")
    state = control.status()
    assert state.state == ServerState.RUNNING
    assert state.main_pid is not None
    assert psutil.Process(state.main_pid).is_running()
    text = ""

    def logged() -> bool:
        nonlocal text
        text += log.read_new()
        return "\n" in text

    wait_until(logged)
    assert text == "server up from-settings ['--tp', '2']\n"
    log.close()


@pytest.mark.slow
def test_second_start_is_refused(tmp_path: Path, controls: list[ProcessControl]) -> None:
    """Starting while the server runs fails and names the running pid."""
    control = _control(tmp_path, SERVE)
    controls.append(control)
    control.start("test:1")
    pid = control.status().main_pid
    with pytest.raises(BackendError, match=f"already running \\(pid {pid}\\)"):
        control.start("test:1")


@pytest.mark.slow
def test_stop_with_sigterm(tmp_path: Path) -> None:
    """A server that honours SIGTERM ends "terminated" with exit -15 and is then inactive."""
    control = _control(tmp_path, SERVE)
    control.start("test:1")
    result = control.stop(grace_s=30)
    assert result.how == "terminated"
    assert result.exit_status == -signal.SIGTERM
    assert result.duration_s >= 0
    assert control.status().state == ServerState.STOPPED


@pytest.mark.slow
def test_stop_kills_after_the_grace_period(tmp_path: Path) -> None:
    """A server ignoring SIGTERM is SIGKILLed after the grace and reported as killed (-9)."""
    control = _control(tmp_path, STUBBORN)
    log = control.open_log()
    control.start("test:1")
    wait_until(lambda: "ignoring" in log.read_new())
    result = control.stop(grace_s=0.3)
    assert (result.how, result.exit_status) == ("killed", -9)
    assert result.duration_s >= 0.3
    assert control.status().state == ServerState.STOPPED
    log.close()


@pytest.mark.slow
def test_stop_signals_the_whole_process_group(tmp_path: Path) -> None:
    """The server's children are stopped with it (signals go to its process group)."""
    control = _control(tmp_path, WITH_CHILD)
    log = control.open_log()
    control.start("test:1")
    text = ""

    def child_started() -> bool:
        nonlocal text
        text += log.read_new()
        return text.endswith("\n")

    wait_until(child_started)
    child_pid = int(text.split()[1])
    control.stop(grace_s=30)

    def child_gone() -> bool:
        try:
            return psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(child_gone)
    log.close()


@pytest.mark.slow
def test_kill_sigkills_the_whole_group_without_a_grace(tmp_path: Path) -> None:
    """kill() ends a server that would ignore SIGTERM, and its child, by SIGKILL at once:
    killed, -9, the child gone too; a second kill finds nothing running."""
    control = _control(tmp_path, STUBBORN.replace("print(", "import subprocess; "
                       "child = subprocess.Popen(['sleep', '60']); print(child.pid, "))  # fmt: skip
    log = control.open_log()
    control.start("test:1")
    child_pid = int(_read_until(log, "ignoring").split()[0])
    result = control.kill()
    assert (result.how, result.exit_status) == ("killed", -9)
    assert not control.status().running
    wait_until(lambda: not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status()
               == psutil.STATUS_ZOMBIE)  # fmt: skip
    assert control.kill().how == "not_running"
    log.close()


def _read_until(log: LogSource, marker: str) -> str:
    """The log's text read until ``marker`` shows in it."""
    text = ""

    def seen() -> bool:
        nonlocal text
        text += log.read_new()
        return marker in text

    wait_until(seen)
    return text


def test_stop_when_not_running(tmp_path: Path) -> None:
    """Stopping a server that never ran reports not_running."""
    assert _control(tmp_path, SERVE).stop(grace_s=1).how == "not_running"


@pytest.mark.slow
def test_crash_is_failed_with_its_exit_status(tmp_path: Path) -> None:
    """A server that exits non-zero on its own is failed with that exit status."""
    control = _control(tmp_path, "import sys; sys.exit(3)")
    control.start("test:1")
    wait_until(lambda: not control.status().running)
    state = control.status()
    assert (state.state, state.exit_status, state.main_pid) == (ServerState.FAILED, 3, None)
    assert state.started_at is not None


@pytest.mark.slow
def test_killed_by_someone_else_is_failed_with_minus_nine(tmp_path: Path) -> None:
    """A SIGKILL from outside (the OOM killer) shows as failed with exit status -9."""
    control = _control(tmp_path, SERVE)
    control.start("test:1")
    pid = control.status().main_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not control.status().running)
    assert (control.status().state, control.status().exit_status) == (ServerState.FAILED, -9)


@pytest.mark.slow
def test_restarted_agent_reattaches_and_never_starts_twice(tmp_path: Path) -> None:
    """A new backend on the same state dir finds the running server by pid and create time."""
    first = _control(tmp_path, SERVE)
    first.start("test:1")
    pid = first.status().main_pid
    again = _control(tmp_path, SERVE)  # the agent after a restart: no child handle
    assert again.status().state == ServerState.RUNNING
    assert again.status().main_pid == pid
    with pytest.raises(BackendError, match="already running"):
        again.start("test:1")
    result = again.stop(grace_s=30)
    assert result.how == "terminated"
    assert again.status().state == ServerState.STOPPED
    first.status()  # reap the child in the first instance too


def test_recycled_pid_is_not_mistaken_for_the_server(tmp_path: Path) -> None:
    """A recorded pid whose create time differs belongs to another process: not running."""
    control = _control(tmp_path, SERVE)
    (tmp_path / "state").mkdir()
    record = {
        "pid": os.getpid(),
        "create_time": 1.0,
        "started_at": 1.0,
        "log_offset": 0,
        "stop_requested": False,
        "exit_status": None,
    }
    (tmp_path / "state" / "server.json").write_text(json.dumps(record))
    assert control.status().state == ServerState.FAILED
    assert control.stop(grace_s=1).how == "not_running"


@pytest.mark.slow
def test_log_since_start_rereads_the_current_run(
    tmp_path: Path, controls: list[ProcessControl]
) -> None:
    """After an agent restart, open_log(since=started_at) reads the run from its beginning."""
    (tmp_path / "server.log").write_text("an older run\n")
    first = _control(tmp_path, SERVE)
    controls.append(first)
    first.start("test:1")
    probe_log = first.open_log(since=first.status().started_at)
    wait_until(lambda: "server up" in probe_log.read_new())
    probe_log.close()
    again = _control(tmp_path, SERVE)
    started_at = again.status().started_at
    log = again.open_log(since=started_at)
    assert log.read_new().startswith("server up")
    fresh = again.open_log()
    assert fresh.read_new() == ""  # without since: only what comes next
    fresh.close()
    log.close()


@pytest.mark.slow
def test_missing_executable_is_a_backend_error(tmp_path: Path) -> None:
    """An argv whose program does not exist fails to start with the program named."""
    control = ProcessControl(
        tmp_path / "state",
        ["/nonexistent/python", "-m", "sglang.launch_server"],
        tmp_path / "log",
        {},
        SystemClock(),
    )
    with pytest.raises(BackendError, match="/nonexistent/python"):
        control.start("test:1")
    assert control.status().state == ServerState.STOPPED


@pytest.mark.slow
def test_last_run_log_is_the_beginning_of_the_last_run(
    tmp_path: Path, controls: list[ProcessControl]
) -> None:
    """The log file holds every run; last_run_log starts at the last run's first line, and its
    key changes with a new run or more output."""
    control = _control(tmp_path, SERVE, "first")
    controls.append(control)
    assert control.last_run_key() is None  # no log yet
    control.start("test:1")
    wait_until(lambda: "first" in control.last_run_log(4096))
    first_key = control.last_run_key()
    control.stop(grace_s=5)
    control.write_command([PYTHON, "-c", SERVE, "second"])
    control.start("test:1")
    wait_until(lambda: "second" in control.last_run_log(4096))
    text = control.last_run_log(4096)
    assert text.startswith("server up")
    assert "first" not in text
    assert control.last_run_key() != first_key
    assert control.last_run_log(9) == "server up"


@pytest.mark.slow
def test_last_run_key_stops_changing_past_the_runs_first_8_mib(
    tmp_path: Path, controls: list[ProcessControl]
) -> None:
    """The key changes while the run's output is within the 8 MiB a reader parses, and holds
    once the output goes past it, so request lines do not make readers parse the start again."""
    control = _control(tmp_path, SERVE, "first")
    controls.append(control)
    control.start("test:1")
    wait_until(lambda: "first" in control.last_run_log(4096))
    early = control.last_run_key()
    log = tmp_path / "server.log"
    with log.open("a", encoding="utf-8") as handle:
        handle.write("x" * 100 + "\n")
    assert control.last_run_key() != early
    with log.open("a", encoding="utf-8") as handle:
        handle.write("x" * (8 * 1024 * 1024) + "\n")
    past = control.last_run_key()
    with log.open("a", encoding="utf-8") as handle:
        handle.write("y" * 1000 + "\n")
    assert control.last_run_key() == past


@pytest.mark.slow
def test_a_start_recorded_before_its_spawn_is_found_by_its_marker(
    tmp_path: Path, spawn: Spawn
) -> None:
    """An agent killed between spawning the server and recording its pid left ``server.json``
    with the start's marker and no pid: a new backend finds the server by the marker in its
    environment (its own process group's leader), reports it running and adopts it, so it is
    neither waited on as a stranger nor started a second time."""
    control = _control(tmp_path, SERVE)
    control.start("7:1")  # the server.json a completed start leaves, to rewrite as the crash did
    control.stop(grace_s=5)
    record = json.loads((tmp_path / "state" / "server.json").read_text())
    pending = {**record, "pid": None, "create_time": 0.0, "stop_requested": False,
               "exit_status": None, "marker": "7:2"}  # fmt: skip
    (tmp_path / "state" / "server.json").write_text(json.dumps(pending))
    # What ProcessControl.start spawns, spawned here as the killed agent did.
    env = {**os.environ, MARKER_ENV: "7:2", STATE_DIR_ENV: str(tmp_path / "state")}
    # Another agent's server with the same marker (a second agent on this host) is not ours.
    stranger = spawn(PYTHON, "-c", SERVE, env={**env, STATE_DIR_ENV: str(tmp_path / "other")},
                     start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
    orphan = spawn(PYTHON, "-c", SERVE, env=env, start_new_session=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    wait_until(lambda: _environ_has(stranger.pid, "7:2"))
    wait_until(lambda: _environ_has(orphan.pid, "7:2"))
    again = _control(tmp_path, SERVE)
    assert again.started("7:2")
    assert not again.started("7:1")
    status = again.status()
    assert (status.state, status.main_pid) == (ServerState.RUNNING, orphan.pid)
    with pytest.raises(BackendError, match="already running"):
        again.start("7:3")
    assert again.stop(grace_s=5).how == "terminated"
    assert again.status().state == ServerState.STOPPED


def test_a_start_recorded_but_never_spawned_is_not_running(tmp_path: Path) -> None:
    """A start recorded with its marker whose process does not exist (the agent died before
    the spawn) counts as not started: stopped, and ``started`` is false, so it is started."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "server.json").write_text(json.dumps(
        {"pid": None, "create_time": 0.0, "started_at": 1.0, "log_offset": 0,
         "marker": "7:1"}))  # fmt: skip
    control = _control(tmp_path, SERVE)
    assert control.status().state == ServerState.STOPPED
    assert not control.started("7:1")
    assert control.stop(grace_s=1).how == "not_running"


@pytest.mark.slow
def test_the_server_carries_its_marker_in_its_environment(
    tmp_path: Path, controls: list[ProcessControl]
) -> None:
    """A started server's environment holds KIMI_OPS_OPERATION=<marker> beside [agent] env, and
    the backend says that start happened."""
    control = _control(tmp_path, SERVE)
    controls.append(control)
    control.start("12:3")
    pid = control.status().main_pid
    assert pid is not None
    environ = psutil.Process(pid).environ()
    assert environ[MARKER_ENV] == "12:3"
    assert environ["KIMI_TEST_MARK"] == "from-settings"
    assert control.started("12:3")
    assert not control.started("12:2")


def _environ_has(pid: int, marker: str) -> bool:
    try:
        return psutil.Process(pid).environ().get(MARKER_ENV) == marker
    except psutil.Error:
        return False


def test_a_command_written_by_the_agent_is_no_edit_but_an_edited_config_is(
    tmp_path: Path,
) -> None:
    """A change the agent writes (a resize's command) leaves command_edit None; a control
    built from an edited [agent] command on the same record reports the edit against the
    command the record was taken from; adopting it makes the config's command the recorded one
    (the agent's kept as the previous) and the edit is gone."""
    original = [PYTHON, "-c", SERVE, "--hicache-ratio", "2"]
    first = ProcessControl(tmp_path / "state", original, tmp_path / "log", {}, SystemClock())
    resized = [*original[:-1], "4"]
    first.write_command(resized)
    assert first.command_edit() is None
    edited = [*original, "--enable-metrics"]
    again = ProcessControl(tmp_path / "state", edited, tmp_path / "log", {}, SystemClock())
    edit = again.command_edit()
    assert edit is not None
    assert (list(edit.configured), list(edit.taken_from)) == (edited, original)
    again.adopt_configured()
    assert again.read_command() == edited
    assert again.previous_command() == resized
    assert again.command_edit() is None


_PRINT_LIMITS = (
    "import resource\n"
    "for name in ('NOFILE', 'MEMLOCK'):\n"
    "    print(name, *resource.getrlimit(getattr(resource, 'RLIMIT_' + name)), flush=True)\n"
)
# An agent whose soft limits are low (as an unconfigured service's are) starting the server.
_AGENT_WITH_LOW_LIMITS = (
    "import resource, sys, time\n"
    "from pathlib import Path\n"
    "from bot.agent.control.process import ProcessControl\n"
    "from bot.clock import SystemClock\n"
    "for which, soft in ((resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_MEMLOCK, 65536)):\n"
    "    resource.setrlimit(which, (soft, resource.getrlimit(which)[1]))\n"
    "tmp = Path(sys.argv[1])\n"
    "control = ProcessControl(tmp / 'state', [sys.executable, '-c', sys.argv[2]],\n"
    "                         tmp / 'server.log', {}, SystemClock())\n"
    "control.start('limits:1')\n"
    "deadline = time.monotonic() + 30\n"
    "while control.status().running and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
)


@pytest.mark.slow
def test_the_server_gets_the_example_units_limits_as_far_as_the_agents_allow(
    tmp_path: Path,
) -> None:
    """The server an agent with low soft limits starts has LimitNOFILE 65535 and LimitMEMLOCK
    infinity, cut to the agent's hard limits (which an unprivileged process cannot raise), not
    the agent's 256 files and 64 KiB. Failed before the fix: the server inherited them."""
    subprocess.run(
        [PYTHON, "-c", _AGENT_WITH_LOW_LIMITS, str(tmp_path), _PRINT_LIMITS],
        check=True,
        timeout=60,
    )
    shown = {
        name: (int(soft), int(hard))
        for name, soft, hard in (
            line.split() for line in (tmp_path / "server.log").read_text().splitlines()
        )
    }
    nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    memlock_hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    infinity = resource.RLIM_INFINITY
    nofile_soft = 65535 if nofile_hard == infinity else min(65535, nofile_hard)
    assert shown["NOFILE"] == (nofile_soft, nofile_hard)
    assert shown["MEMLOCK"] == (memlock_hard, memlock_hard)
