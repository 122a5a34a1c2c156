"""Tests for the systemd backend.

systemd is not PID 1 here, so ``tests/agent/fake_systemd/`` provides stand-in ``systemctl`` and
``journalctl`` executables implementing the verbs the backend uses (the unit's ExecStart runs as
a background process, its output in a journal file). The server they run is the real simulator,
``python -m bot.sim`` on the small-2gpu profile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.agent.cmdline import HiCacheSetting, read_hicache, rewrite_hicache
from bot.agent.control.protocol import ServerControl
from bot.agent.control.systemd import SystemdControl, parse_exec_start, quote_argv
from bot.agent.host.sim import SimProbe
from bot.clock import SystemClock
from bot.errors import BackendError
from bot.sim import load_profile
from bot.vocab import ServerState
from tests.agent.conftest import FAKE_SYSTEMD, fake_systemd_executables, wait_until

UNIT = "sglang-test.service"
SIM = [sys.executable, "-m", "bot.sim", "--model-path", "m", "--tp", "2", "--port", "0"]


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SystemdControl]:
    """A fake systemd with one unit running the simulator; its server is stopped afterwards."""
    units, state, sim_state = tmp_path / "units", tmp_path / "fake-state", tmp_path / "sim"
    for directory in (units, state, sim_state):
        directory.mkdir()
    argv = [*SIM, "--enable-hierarchical-cache", "--hicache-ratio", "2"]
    (units / UNIT).write_text(
        "[Service]\n"
        "Environment=KIMI_SIM_PROFILE=small-2gpu\n"
        "Environment=KIMI_SIM_TIME_SCALE=0.01\n"
        f"Environment=KIMI_SIM_STATE_DIR={sim_state}\n"
        f"Environment=PYTHONPATH={Path(__file__).resolve().parents[3]}\n"
        f"ExecStart={' '.join(argv)}\n"
    )
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(state))
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(units))
    systemctl, journalctl = fake_systemd_executables(tmp_path / "bin")
    control = SystemdControl(
        UNIT,
        units,
        [],
        SystemClock(),
        systemctl=str(systemctl),
        journalctl=str(journalctl),
    )
    yield control
    control.stop(grace_s=5)


def _calls(control: SystemdControl) -> list[str]:
    return (Path(os.environ["FAKE_SYSTEMD_STATE"]) / "calls.log").read_text().splitlines()


@pytest.mark.parametrize(
    "argv",
    [
        ["/usr/bin/python3", "-m", "sglang.launch_server"],
        ["python", "--served-model-name", "kimi k2.5", "--x", 'a"b', "c\\d"],
        ["python", "--api-key", "$HOME", "--chat-template", "100%", "--empty", ""],
    ],
)
def test_quoting_round_trips(argv: list[str]) -> None:
    """Arguments with spaces, quotes, backslashes, $ and % survive quoting and parsing."""
    assert parse_exec_start(quote_argv(argv)) == argv


def test_quoting_escapes_what_systemd_would_expand() -> None:
    """$ and % are doubled so systemd neither expands variables nor specifiers."""
    assert quote_argv(["a$b", "50%"]) == '"a$$b" "50%%"'


def test_newline_cannot_be_written_to_a_unit() -> None:
    """An argument with a newline (a second unit line) is refused."""
    with pytest.raises(BackendError, match="newline"):
        quote_argv(["python", "x\nExecStartPre=/bin/evil"])


@pytest.mark.slow
def test_it_is_a_server_control(systemd: SystemdControl) -> None:
    """SystemdControl satisfies the ServerControl protocol."""
    control: ServerControl = systemd
    assert control.name == "systemd"


@pytest.mark.slow
def test_command_comes_from_the_unit_until_a_drop_in_exists(systemd: SystemdControl) -> None:
    """Without a drop-in the command is the unit's ExecStart, read through systemctl show."""
    assert systemd.read_command() == [*SIM, "--enable-hierarchical-cache", "--hicache-ratio", "2"]
    assert systemd.previous_command() is None


@pytest.mark.slow
def test_write_command_writes_a_drop_in_keeps_the_previous_and_reloads(
    systemd: SystemdControl,
) -> None:
    """A write resets ExecStart in the drop-in, keeps the old command, and reloads systemd."""
    original = systemd.read_command()
    ratio4 = rewrite_hicache(original, HiCacheSetting(True, ratio=4.0))
    systemd.write_command(ratio4)
    text = systemd.drop_in.read_text()
    assert text.startswith("[Service]\nExecStart=\nExecStart=")
    assert systemd.read_command() == ratio4
    assert systemd.previous_command() == original
    size8 = rewrite_hicache(ratio4, HiCacheSetting(True, size_gb=8))
    systemd.write_command(size8)
    assert systemd.previous_command() == ratio4
    assert _calls(systemd).count("daemon-reload") == 2


@pytest.mark.slow
def test_start_follow_log_and_stop_the_simulator(systemd: SystemdControl) -> None:
    """The unit starts the simulator with the drop-in's command, its log is followed through
    journalctl, the RAM it holds is what its host pools need, and a stop ends it cleanly."""
    systemd.write_command(rewrite_hicache(systemd.read_command(), HiCacheSetting(True, ratio=3)))
    systemd.start("test:1")
    state = systemd.status()
    assert state.state == ServerState.RUNNING
    assert state.main_pid is not None
    assert state.started_at is not None
    log = systemd.open_log(since=state.started_at)
    text = ""

    def ready() -> bool:
        nonlocal text
        text += log.read_new()
        return "The server is fired up and ready to roll!" in text

    try:
        wait_until(ready, timeout_s=60)
    finally:
        log.close()
    assert "hicache_ratio=3.0" in text
    assert read_hicache(systemd.read_command()).ratio == 3.0
    # small-2gpu: 200,000 device tokens at the default fraction, 35,136 KV bytes per token;
    # ratio 3 -> 600,000 tokens, one extra page (page size 1) -> 600,001 tokens per rank, 2 ranks.
    pools = 2 * 600_001 * 35_136
    probe = SimProbe(load_profile("small-2gpu"), _sim_state_dir())
    assert probe.released_by_stop(state.main_pid, probe.ram()) >= pools
    result = systemd.stop(grace_s=30)
    assert result.how == "terminated"
    assert systemd.status().state == ServerState.STOPPED
    assert probe.released_by_stop(state.main_pid, probe.ram()) == 0


def _sim_state_dir() -> Path:
    units = Path(os.environ["FAKE_SYSTEMD_UNIT_DIR"])
    for line in (units / UNIT).read_text().splitlines():
        if line.startswith("Environment=KIMI_SIM_STATE_DIR="):
            return Path(line.split("=", 2)[2])
    raise AssertionError("no sim state dir in the unit")


@pytest.mark.slow
def test_a_server_that_exits_non_zero_is_failed(systemd: SystemdControl) -> None:
    """A command that exits 3 leaves the unit failed with ExecMainStatus 3."""
    systemd.write_command([sys.executable, "-c", "import sys; print('bye'); sys.exit(3)"])
    systemd.start("test:1")
    wait_until(lambda: not systemd.status().running)
    state = systemd.status()
    assert (state.state, state.exit_status) == (ServerState.FAILED, 3)


def _start_stubborn(systemd: SystemdControl) -> None:
    """Start a server that ignores SIGTERM; return once it is up."""
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    systemd.write_command([sys.executable, "-c", code])
    log = systemd.open_log()
    systemd.start("test:1")
    try:
        wait_until(lambda: "up" in log.read_new())
    finally:
        log.close()


@pytest.mark.slow
def test_stubborn_server_is_killed_after_the_grace(systemd: SystemdControl) -> None:
    """A server ignoring SIGTERM gets SIGKILL via systemctl kill and reports -9."""
    _start_stubborn(systemd)
    result = systemd.stop(grace_s=0.5)
    assert (result.how, result.exit_status) == ("killed", -9)
    assert any(call.startswith("kill --signal=SIGKILL") for call in _calls(systemd))


@pytest.mark.slow
def test_kill_sends_sigkill_to_the_unit_without_a_stop(systemd: SystemdControl) -> None:
    """kill() is ``systemctl kill --signal=SIGKILL`` on the unit, no ``stop`` (no grace): a
    server ignoring SIGTERM is gone, killed by signal 9."""
    _start_stubborn(systemd)
    before = len(_calls(systemd))
    result = systemd.kill()
    assert result.how == "killed"
    assert not systemd.status().running
    calls = _calls(systemd)[before:]
    assert f"kill --signal=SIGKILL {UNIT}" in calls
    assert not any(call.startswith("stop") for call in calls)


@pytest.mark.slow
def test_start_while_running_is_refused(systemd: SystemdControl) -> None:
    """Starting a running unit fails and names its pid."""
    systemd.write_command([sys.executable, "-c", "import time; time.sleep(60)"])
    systemd.start("test:1")
    with pytest.raises(BackendError, match="already running"):
        systemd.start("test:1")


def test_systemctl_failure_is_a_backend_error(tmp_path: Path) -> None:
    """A systemctl that fails (here: not installed) surfaces as BackendError with the command."""
    control = SystemdControl(
        UNIT, tmp_path, [], SystemClock(), systemctl=str(tmp_path / "no-systemctl")
    )
    with pytest.raises(BackendError, match="no-systemctl"):
        control.status()


@pytest.mark.slow
def test_fallback_command_when_systemd_has_none(systemd: SystemdControl) -> None:
    """With no drop-in and no ExecStart in the unit, [agent] command is used."""
    units = Path(os.environ["FAKE_SYSTEMD_UNIT_DIR"])
    (units / "bare.service").write_text("[Service]\n")
    control = SystemdControl(
        "bare.service",
        units,
        ["python", "-m", "sglang.launch_server"],
        SystemClock(),
        systemctl=str(FAKE_SYSTEMD / "systemctl"),
    )
    assert control.read_command() == ["python", "-m", "sglang.launch_server"]


@pytest.mark.slow
def test_the_log_of_a_run_holds_none_of_the_previous_runs_lines(systemd: SystemdControl) -> None:
    """Two runs in the same second: the journal opened for the second run (by its invocation ID,
    not --since, which has whole-second precision) shows only the second run's lines."""
    for marker in ("run A: Not enough host memory available.", "run B: Init torch distributed"):
        systemd.write_command([sys.executable, "-c", f"print({marker!r}, flush=True)"])
        systemd.start("test:1")
        wait_until(lambda: not systemd.status().running, timeout_s=20)
    source = systemd.open_log(since=systemd.status().started_at)
    chunks: list[str] = []
    try:
        wait_until(lambda: chunks.append(source.read_new()) or "run B" in "".join(chunks), 20)
    finally:
        source.close()
    assert "run A" not in "".join(chunks)
    assert any(call.startswith("show -p InvocationID") for call in _calls(systemd))


@pytest.mark.slow
def test_last_run_log_is_the_beginning_of_the_last_run(systemd: SystemdControl) -> None:
    """After two runs, last_run_log gives the start of the second one only (from the journal, by
    invocation ID), and its key changes with each run."""
    keys = []
    for marker in ("run A: KV Cache is allocated. #tokens: 1", "run B: KV Cache is allocated."):
        systemd.write_command([sys.executable, "-c", f"print({marker!r}, flush=True)"])
        systemd.start("test:1")
        wait_until(lambda: not systemd.status().running, timeout_s=20)
        keys.append(systemd.last_run_key())
    wait_until(lambda: "run B" in systemd.last_run_log(4096), timeout_s=20)
    assert "run A" not in systemd.last_run_log(4096)
    assert None not in keys
    assert keys[0] != keys[1]
    assert systemd.last_run_log(5) == "run B"


@pytest.mark.slow
def test_a_start_is_known_by_the_units_new_invocation(systemd: SystemdControl) -> None:
    """The marker of a start is the unit's invocation: before ``systemctl restart`` the backend
    records the invocation it replaces, so ``started(marker)`` is true only once systemd runs a
    newer one (an agent killed before the restart gets false and starts it)."""
    assert not systemd.started("7:1")
    systemd.start("7:1")
    assert systemd.started("7:1")
    assert not systemd.started("7:2")
    systemd.stop(grace_s=5)
    assert systemd.started("7:1")  # it ran, and ended: followed, never started again
    # What an agent killed between recording start 7:2 and the restart leaves behind.
    record = systemd.drop_in.parent / "50-kimi-ops-start.json"
    invocation = json.loads(record.read_text())["before"]
    current = _show(systemd, "InvocationID")
    assert current
    assert current != invocation
    record.write_text(json.dumps({"marker": "7:2", "before": current}))
    assert not systemd.started("7:2")


def _show(systemd: SystemdControl, prop: str) -> str:
    out = subprocess.run(
        [str(FAKE_SYSTEMD / "systemctl"), "show", "-p", prop, UNIT],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return out.strip().partition("=")[2]
