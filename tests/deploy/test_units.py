"""The systemd units in deploy/: accepted by ``systemd-analyze verify`` where it is installed, and
the bot's unit keeps the hardening an unprivileged Slack front end should have.

``systemd-analyze verify`` needs no running systemd, but it checks that each ``ExecStart=``
program exists: the test copies the unit and points that program (and only that) at a stand-in
executable, since no kimi-ops is installed under /opt here.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.agent.config import HttpLimits
from bot.agent.rlimits import SERVER_LIMITS, descriptors_needed

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BOT_UNIT = DEPLOY / "kimi-ops-bot.service"
AGENT_UNIT = DEPLOY / "kimi-ops-agent.service"
UNITS = sorted(DEPLOY.glob("*.service"))

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (apt-get install systemd)"
)


def _service_section(path: Path) -> dict[str, list[str]]:
    """[Service] as key -> every value given, in order (systemd keys may repeat)."""
    entries: dict[str, list[str]] = {}
    section = None
    lines = path.read_text().replace("\\\n", " ").splitlines()
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if stripped.startswith("["):
            section = stripped.strip("[]")
        elif section == "Service":
            key, _, value = stripped.partition("=")
            entries.setdefault(key.strip(), []).append(value.strip())
    return entries


def _last(entries: dict[str, list[str]], key: str) -> str | None:
    return entries[key][-1] if key in entries else None


def _with_stand_in_program(unit: Path, tmp_path: Path) -> Path:
    program = _service_section(unit)["ExecStart"][-1].split()[0]
    stand_in = tmp_path / "bin" / Path(program).name
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace(program, str(stand_in)))
    return copy


@needs_systemd_analyze
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_passes_systemd_analyze_verify(unit: Path, tmp_path: Path) -> None:
    """systemd-analyze verify accepts the unit without a single complaint."""
    result = subprocess.run(
        [str(SYSTEMD_ANALYZE), "verify", "--man=no", str(_with_stand_in_program(unit, tmp_path))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (result.returncode, result.stderr + result.stdout) == (0, "")


@needs_systemd_analyze
def test_verify_complains_about_a_broken_unit(tmp_path: Path) -> None:
    """The verify step can fail: a misspelt key and a bad ProtectSystem value are reported."""
    broken = tmp_path / "broken.service"
    broken.write_text(
        BOT_UNIT.read_text().replace("ProtectSystem=strict", "ProtectSystem=sometimes\nRestat=no")
    )
    result = subprocess.run(
        [str(SYSTEMD_ANALYZE), "verify", "--man=no", str(_with_stand_in_program(broken, tmp_path))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "sometimes" in result.stderr
    assert "Restat" in result.stderr


def test_bot_unit_is_hardened() -> None:
    """The bot runs as the dedicated user kimi-ops with no new privileges, a read-only system and
    private /tmp, no access to homes, secrets from an EnvironmentFile, restart on failure."""
    service = _service_section(BOT_UNIT)
    expected = {
        "User": "kimi-ops",
        "Group": "kimi-ops",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "ProtectHome": "yes",
        "Restart": "on-failure",
        "CapabilityBoundingSet": "",
    }
    assert {key: _last(service, key) for key in expected} == expected
    assert _last(service, "EnvironmentFile") == "/etc/kimi-ops/bot.env"


def test_bot_unit_can_write_only_its_state_directory() -> None:
    """Under ProtectSystem=strict the one writable path is the state directory, where the
    working directory (and so a relative SQLite database) is."""
    service = _service_section(BOT_UNIT)
    state = "/var/lib/" + service["StateDirectory"][-1]
    assert service["ReadWritePaths"] == [state]
    assert _last(service, "WorkingDirectory") == state


def test_bot_unit_runs_the_bot_with_the_shared_config() -> None:
    """ExecStart runs `kimi-ops bot --config /etc/kimi-ops/kimi-ops.toml`."""
    argv = _service_section(BOT_UNIT)["ExecStart"][-1].split()
    assert Path(argv[0]).name == "kimi-ops"
    assert argv[1:] == ["bot", "--config", "/etc/kimi-ops/kimi-ops.toml"]


def test_no_secret_is_written_into_a_unit() -> None:
    """Tokens reach the services only through EnvironmentFile=, never Environment= lines."""
    for unit in (BOT_UNIT, AGENT_UNIT):
        for value in _service_section(unit).get("Environment", []):
            name = value.split("=", 1)[0]
            assert not name.startswith("SLACK_"), (unit.name, value)
            assert "TOKEN" not in name, (unit.name, value)


def test_agent_unit_says_why_it_needs_its_rights() -> None:
    """The agent's unit explains systemctl on one unit, the drop-in directory, the journal and
    root or the server's owner, next to the directives."""
    comments = " ".join(
        line.lstrip("# ") for line in AGENT_UNIT.read_text().splitlines() if line.startswith("#")
    )
    for reason in ("systemctl", "ONE unit", "drop-in directory", "journal", "root", "owns the"):
        assert reason in comments, reason


def _limit(value: str) -> tuple[int, int]:
    """A systemd ``Limit*=`` value (``soft:hard``, one value for both, ``infinity``)."""
    soft, _, hard = value.partition(":")

    def number(text: str) -> int:
        return resource.RLIM_INFINITY if text == "infinity" else int(text)

    return number(soft), number(hard or soft)


def test_agent_unit_gives_room_for_its_connections_and_the_servers_limits() -> None:
    """The agent's soft open-file limit fits its default connections and its own files, and its
    hard limits let the process backend's server have the example SGLang unit's. Failed before
    the fix: the agent's unit set no limit (1,024 files, and the server inherited them)."""
    agent = _service_section(AGENT_UNIT)
    server = _service_section(DEPLOY / "sglang-kimi.service")
    soft, hard = _limit(_last(agent, "LimitNOFILE") or "")
    assert soft >= descriptors_needed(HttpLimits().max_connections)
    server_files = _limit(_last(server, "LimitNOFILE") or "")
    server_memlock = _limit(_last(server, "LimitMEMLOCK") or "")
    assert hard >= server_files[1]
    assert _limit(_last(agent, "LimitMEMLOCK") or "") == server_memlock
    wanted = {limit.name: (limit.soft, limit.hard) for limit in SERVER_LIMITS}
    assert wanted == {"NOFILE": server_files, "MEMLOCK": server_memlock}
